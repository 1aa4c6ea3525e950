"""The runs a scheduler has seen, read from the training events (what the Training page shows).

Pure functions of the event messages of :mod:`dasklbfgs.monitor.events`: which runs there
are, newest first; each run's status, settings and curves. The page turns them into plots.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from dasklbfgs.scoring.names import SCORE_LABELS, SCORES

__all__ = ["RunView", "runs_newest_first", "Curve", "CURVES", "HELD_OUT_NAMES"]

#: the held-out metric of each task (:data:`~dasklbfgs.scoring.names.SCORES`), as plots name it
HELD_OUT_NAMES = {score: f"held-out {label}" for score, label in SCORE_LABELS.items()}


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
        return CURVE_LABELS.get(key) or HELD_OUT_NAMES.get(key.removeprefix("eval_"), key)

    def values(self, steps: list[dict[str, Any]], key: str) -> list[float]:
        ys = [e.get(key, math.nan) for e in steps]
        if not self.rate:
            return ys
        times = [e.get("time", math.nan) for e in steps]
        return [math.nan] + [(b - a) / (t1 - t0) if t1 > t0 else math.nan
                             for a, b, t0, t1 in zip(ys, ys[1:], times, times[1:])]


CURVE_LABELS = {"gnorm": "gradient max-norm", "eval_objective": "held-out loss",
                "pushes": "updates/s (pushes to the shards)", "step": "updates/s (steps)"}
#: the page's line plots
CURVES = {"loss": Curve(("loss",)), "gnorm": Curve(("gnorm",), log=True),
          "heldout_loss": Curve(("eval_objective",)),
          "heldout_metric": Curve(tuple(f"eval_{name}" for name in SCORES)),
          "rate": Curve(("pushes", "step"), rate=True)}


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


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


