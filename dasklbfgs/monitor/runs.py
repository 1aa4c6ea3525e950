"""The runs a scheduler has seen, read from the training events (what the Training page shows).

Pure functions of the event messages of :mod:`dasklbfgs.monitor.events`: which runs there
are, newest first; each run's status, settings, curves, latest held-out figures and final
scores, named as :mod:`dasklbfgs.scoring.names` names them. The page turns them into plots
and tables.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, TypeGuard

from dasklbfgs.scoring.names import HELD_OUT, held_out_label, metric_label

__all__ = ["RunView", "runs_newest_first", "Curve", "CURVES", "HELD_OUT_KEYS", "shown"]

#: every held-out figure a run may record as it goes, in the order the page shows them: the
#: objective, then each task's :data:`~dasklbfgs.scoring.names.HELD_OUT` metrics
HELD_OUT_KEYS = tuple(dict.fromkeys(["eval_objective", *(f"eval_{name}" for names in HELD_OUT.values()
                                                         for name in names)]))


@dataclass
class RunView:
    """One run's events: its start event (None if not seen), step events and end event."""

    run: str
    solver: str
    start: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def x_label(self) -> str:
        """What the run's steps count (its start event's ``unit``)."""
        return self.start["unit"] if self.start is not None else "step"

    @property
    def loss_label(self) -> str:
        """What the run's ``loss`` is (its start event's ``loss_name``)."""
        return self.start["loss_name"] if self.start is not None else "training loss"

    @property
    def has_replicas(self) -> bool:
        """Whether the run's events carry per-replica progress (its start event says)."""
        return bool(self.start is not None and self.start["has_replicas"])

    @property
    def state(self) -> str:
        """"failed", "finished" or "running"."""
        if self.end is not None:
            return "failed" if "error" in self.end else "finished"
        return "finished" if any(e.get("finished") for e in self.steps[-1:]) else "running"

    def status(self) -> str:
        """One line of HTML: the run, its solver and state, with the solver's message or the error."""
        head = f"<b>{self.run}</b> ({self.solver})"
        last = self.steps[-1] if self.steps else {}
        progress = f"{self.x_label} {last.get('step', 0)}, {last.get('time', 0.0):.1f} s"
        if self.state == "running":
            return f"{head}: <b>running</b>, {progress}"
        if self.state == "failed" and self.end is not None:  # (failed: there is an end event)
            return f"{head}: <b style='color:#c00'>failed</b> after {progress}: {self.end['error']}: " \
                   f"{html.escape(self.end['message'], quote=False)}"
        if self.end is None:  # a replica method's finished event without the end event
            return f"{head}: <b>finished</b> at {progress}"
        outcome = "success" if self.end["success"] else "no success"
        return f"{head}: <b>finished</b> ({self.end['status']}, {outcome}) at {progress}: " \
               f"{html.escape(self.end['message'], quote=False)}"

    def settings(self) -> list[tuple[str, str]]:
        """(setting, value) rows of the start event: solver, model, data, workers, options."""
        if self.start is None:
            return []
        s, data = self.start, self.start["dataset"]
        rows = [("solver", s["solver"]), ("model", s["model"]), ("parameters", f"{s['n_params']:,}"),
                ("dataset", f"{data['path']} ({data['n_samples']:,} x {data['n_features']:,})"),
                ("workers", str(s["n_workers"])),
                ("started", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s["started_at"])))]
        return rows + [(name, repr(value)) for name, value in s["options"].items()]

    def held_out(self) -> list[tuple[str, float, Any]]:
        """(label, value, step) of the latest finite value of every held-out figure (``eval_``
        key) the run recorded: those of :data:`HELD_OUT_KEYS` in its order, then any other."""
        recorded = dict.fromkeys(k for e in self.steps for k in e if k.startswith("eval_"))
        rows = []
        for key in [k for k in HELD_OUT_KEYS if k in recorded] + [k for k in recorded if k not in HELD_OUT_KEYS]:
            latest = next((e for e in reversed(self.steps) if _finite(e.get(key))), None)
            if latest is not None:
                rows.append((held_out_label(key), latest[key], latest.get("step")))
        return rows

    def final_scores(self) -> list[tuple[str, Any, Any]]:
        """(label, train, test) of the scores the run's end event carries (``result.scores``;
        none if it was not scored): every metric in the order they came, the confusion
        matrix one row per true class; ``test`` None without held-out data."""
        scores = self.end.get("scores") if self.end is not None else None
        if not scores:
            return []
        train, test = scores.get("train", {}), scores.get("test", {})
        rows: list[tuple[str, Any, Any]] = []
        for name in dict.fromkeys([*train, *test]):
            if name == "confusion_matrix":
                rows += [(f"{metric_label(name)}, true class {k}", *pair)
                         for k, pair in enumerate(zip_longest(train.get(name, ()), test.get(name, ())))]
            else:
                rows.append((metric_label(name), train.get(name), test.get(name)))
        return rows

    def points(self, curve: Curve, x: str) -> dict[str, list[float]]:
        """The curve's points against ``x`` ("step" or "time"): finite values only, positive
        only on a log axis (a 0 or nan would stretch it to 1e-300 or break the line)."""
        key = curve.key(self)
        if key is None:
            return {"x": [], "y": []}
        xs = [e["time"] if x == "time" else e.get("step") for e in self.steps]
        ys = curve.values(self.steps, key)
        pairs = [(a, b) for a, b in zip(xs, ys) if _finite(a) and _finite(b) and (not curve.log or b > 0)]
        return {"x": [a for a, _ in pairs], "y": [b for _, b in pairs]}


@dataclass(frozen=True)
class Curve:
    """A plotted quantity: the event keys that may hold it (the first present is used) and its axis."""

    keys: tuple[str, ...]
    log: bool = False
    rate: bool = False  # the change per second of the key's counter, not the key itself

    def key(self, run: RunView) -> str | None:
        return next((k for k in self.keys if any(k in e for e in run.steps)), None)

    def label(self, run: RunView) -> str:
        key = self.key(run)
        if key is None:
            return ""
        if key == "loss":
            return run.loss_label
        return held_out_label(key) if key.startswith("eval_") else CURVE_LABELS.get(key, key)

    def values(self, steps: list[dict[str, Any]], key: str) -> list[float]:
        ys = [e.get(key, math.nan) for e in steps]
        if not self.rate:
            return ys
        times = [e.get("time", math.nan) for e in steps]
        return [math.nan] + [(b - a) / (t1 - t0) if t1 > t0 else math.nan
                             for a, b, t0, t1 in zip(ys, ys[1:], times, times[1:])]


CURVE_LABELS = {"gnorm": "gradient max-norm", "pushes": "updates/s (pushes to the shards)",
                "step": "updates/s (steps)"}
#: the page's line plots: one for each held-out figure (named by its ``eval_`` key)
CURVES = {"loss": Curve(("loss",)), "gnorm": Curve(("gnorm",), log=True),
          **{key: Curve((key,)) for key in HELD_OUT_KEYS}, "rate": Curve(("pushes", "step"), rate=True)}


def runs_newest_first(events: list[dict[str, Any]]) -> list[RunView]:
    """The runs of these event messages (in the order they were logged), newest first."""
    runs: dict[str, RunView] = {}
    for event in events:
        run = runs.setdefault(event["run"], RunView(event["run"], event["solver"]))
        kind = event.get("kind", "step")
        if kind == "start":
            run.start = event
        elif kind == "end":
            run.end = event
        else:
            run.steps.append(event)
    return list(reversed(runs.values()))


def shown(value: Any) -> str:
    """A figure as the page's tables show it: six significant digits, whole numbers with
    thousands separators, lists (a confusion matrix's row) their figures between bars."""
    if value is None:  # a test score of a run without held-out data
        return ""
    if isinstance(value, (list, tuple)):
        return " | ".join(shown(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


