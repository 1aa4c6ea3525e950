"""The runs a scheduler has seen, read from the training events (what the Training page shows).

Pure functions of the event messages of :mod:`dasklbfgs.monitor.events`: which runs there
are, newest first, each labelled by its name, start, solver, dataset and key settings; each
run's status, settings, the panels it fills (known from its start event, so that the page's
layout is fixed from the start), curves, best and latest held-out figures and final scores,
named as :mod:`dasklbfgs.scoring.names` names them; and, for two runs compared, the x axis
they share and their settings side by side. The page turns them into plots and tables.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, TypeGuard

from dasklbfgs.monitor.curve_rules import best_point, honest_limits, is_noisy
from dasklbfgs.scoring.names import HELD_OUT, held_out_label, metric_label

__all__ = ["RunView", "runs_newest_first", "Curve", "CURVES", "HELD_OUT_KEYS", "shown", "shared_axis",
           "settings_side_by_side", "axis_range", "dataset_label", "KEY_SETTINGS", "RATE_CLIP", "DATASET_CHARS"]

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
    def facts(self) -> dict[str, Any]:
        """The start event (empty before it arrives)."""
        return self.start or {}

    @property
    def name(self) -> str:
        """The user's name for the run (its ``name`` option), else its id."""
        return self.facts.get("name") or self.run

    @property
    def steps_per_epoch(self) -> int | None:
        """How many steps make an epoch (None: the steps are not mini-batches, or not known)."""
        return self.facts.get("steps_per_epoch")

    def label(self) -> str:
        """The picker's line: name, start time, solver, dataset, key settings and state."""
        parts = [self.name]
        if self.start is not None:
            s = self.start
            parts += [time.strftime("%H:%M:%S UTC", time.gmtime(s["started_at"])), self.solver,
                      dataset_label(s["dataset"]["path"])]
            key = [f"{k}={_short(s['options'][k])}" for k in KEY_SETTINGS if s["options"].get(k) is not None]
            parts += [" ".join(key)] if key else []
        else:
            parts.append(self.solver)
        return f"{' · '.join(parts)} ({self.state})"

    def fills(self, panel: str) -> bool:
        """Whether the run fills ``panel`` (a key of :data:`CURVES`, or ``"shards"``,
        ``"staleness"``, ``"workers"``, ``"partitions"``, ``"held_out"``, ``"scores"``), as
        its start event says; for events without those facts, whether it has data for it."""
        s = self.facts
        figures = s.get("event_figures")
        if panel in CURVES and panel.startswith("eval_"):
            if "held_out" not in s:
                return any(panel in e for e in self.steps)
            scored = s.get("held_out_metrics") or HELD_OUT.get(s.get("task", ""), ())  # (older runs: by task)
            return bool(s["held_out"]) and panel in ("eval_objective", *(f"eval_{name}" for name in scored))
        given = {**({name: key in figures for name, key in _FIGURE_PANELS.items()} if figures is not None else {}),
                 "loss": True, "rate": s.get("has_replicas"), "held_out": s.get("held_out"), "scores": s.get("scored"),
                 "partitions": s["options"].get("model_partitions", 1) > 1 if "options" in s else None}
        if given.get(panel) is not None:
            return bool(given[panel])
        key = _FIGURE_PANELS.get(panel, panel)
        return any(key in e for e in self.steps) or (panel == "scores" and bool(self.final_scores()))

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
        named = f", {self.run}" if self.name != self.run else ""
        head = f"<b>{html.escape(self.name, quote=False)}</b> ({self.solver}{named})"
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

    def is_noisy(self, curve: Curve) -> bool:
        """Whether the curve is a mini-batch loss (drawn faint, smoothed over)."""
        return curve.key(self) == "loss" and is_noisy(self.loss_label)

    def series_label(self, curve: Curve, smoothed: bool = False) -> str:
        """What the run's line of ``curve`` is, for a legend: ``run-a: objective (full batch)``,
        ``run-b: mini-batch loss (smoothed)`` (``smoothed``: the line is; else ``(noisy)``)."""
        what = curve.label(self)
        if curve.key(self) == "loss":
            what += (" (smoothed)" if smoothed else " (noisy)") if self.is_noisy(curve) else " (full batch)"
        return f"{self.name}: {what}"

    def best(self, curve: Curve, x: str) -> tuple[float, float, str] | None:
        """The best point of a held-out curve against ``x``, and its legend line: ``run-a:
        best held-out accuracy 0.931 at iteration 8`` (None for other curves, or no point)."""
        key = curve.key(self)
        if key is None or not key.startswith("eval_"):
            return None
        scored = [e for e in self.steps if _finite(e.get(key)) and _finite(_x_of(e, x, self.steps_per_epoch))]
        found = best_point(list(range(len(scored))), [e[key] for e in scored], key.removeprefix("eval_"))
        if found is None:
            return None
        entry = scored[int(found[0])]
        return (_x_of(entry, x, self.steps_per_epoch), entry[key],
                f"{self.name}: best {held_out_label(key)} {shown(entry[key])} at {self.x_label} {entry.get('step')}")

    def points(self, curve: Curve, x: str) -> dict[str, list[float]]:
        """The curve's points against ``x`` ("step", "epoch" or "time"): finite values only,
        positive only on a log axis (a 0 or nan would stretch it to 1e-300 or break the line)."""
        key = curve.key(self)
        if key is None:
            return {"x": [], "y": []}
        xs = [_x_of(e, x, self.steps_per_epoch) for e in self.steps]
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


def _x_of(event: dict[str, Any], x: str, per_epoch: int | None) -> Any:
    """An event's position on the x axis ``x``: its time, its step, or its step in epochs."""
    if x == "time":
        return event.get("time")
    step = event.get("step")
    return step / per_epoch if x == "epoch" and per_epoch and _finite(step) else step if x == "step" else None


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def dataset_label(path: str) -> str:
    """A dataset's path (or URL) as the run picker names it: the whole of it if it has at most
    :data:`DATASET_CHARS` characters, else ``…/`` and as many of its last parts as fit, whole,
    the last two at least. Its last part alone would not tell datasets apart: every recipe's
    training split is ``train``, many a dataset is ``train.zarr``."""
    path = path.rstrip("/")
    if len(path) <= DATASET_CHARS:
        return path
    parts = [part for part in path.split("/") if part]  # (a URL's "//" is no part)
    kept = parts[-2:]
    for part in reversed(parts[:-2]):
        if len("…/" + "/".join([part, *kept])) > DATASET_CHARS:
            break
        kept.insert(0, part)
    return "…/" + "/".join(kept)


CURVE_LABELS = {"gnorm": "gradient max-norm", "pushes": "updates/s (pushes to the shards)",
                "step": "updates/s (steps)"}
#: the page's line plots: one for each held-out figure (named by its ``eval_`` key)
CURVES = {"loss": Curve(("loss",)), "gnorm": Curve(("gnorm",), log=True),
          **{key: Curve((key,)) for key in HELD_OUT_KEYS}, "rate": Curve(("pushes", "step"), rate=True)}


#: the most characters of a dataset's path the run picker shows (:func:`dataset_label`)
DATASET_CHARS = 40
#: the options the run picker names a run by, those it has, in this order
KEY_SETTINGS = ("optimizer", "learning_rate", "batch_size", "n_replicas", "epochs", "max_steps", "maxiter", "history")
#: the page's panels of the figures that only some solvers' step events carry (``event_figures``)
_FIGURE_PANELS = {"gnorm": "gnorm", "shards": "pushes_per_shard", "staleness": "staleness",
                  "workers": "rows_per_worker", "partitions": "partition_bytes"}
#: the rate axis (updates/s) ends at this many times the rates' 90th percentile, or at their largest if lower:
#: a spike (a poll that caught a burst of pushes) is clipped rather than flattening the rest
RATE_CLIP = 2.0
#: what each x axis is called (``step``: the runs' own unit)
X_TITLES = {"time": "wall time (s)", "epoch": "epoch"}


def shared_axis(main: RunView, other: RunView | None, wanted: str) -> tuple[str, str]:
    """The x axis to draw ``main`` (compared with ``other``) against, and its title.

    ``wanted`` is the toggle's choice: ``"time"``, wall time; ``"step"``, the runs' progress:
    their own steps when they count the same thing of the same size (``main``'s alone when
    there is no ``other``), else epochs when both have them (mini-batch steps of different
    sizes), else wall time, the one axis every run shares. The title says which, and why
    when the runs' own steps could not be used."""
    if wanted == "time":
        return "time", X_TITLES["time"]
    if other is None or (other.x_label == main.x_label and other.steps_per_epoch == main.steps_per_epoch):
        return "step", main.x_label
    units = f"{main.name} counts {main.x_label}s, {other.name} {other.x_label}s"
    if main.steps_per_epoch and other.steps_per_epoch:
        return "epoch", f"epoch (shared: {units} of other sizes)"
    return "time", f"wall time (s) (shared: {units})"


def settings_side_by_side(main: RunView, other: RunView | None) -> list[tuple[str, str, str, bool]]:
    """(setting, main's value, other's value, whether they differ) for the settings of both
    runs, main's order first; other's value "" when there is no other (nothing differs)."""
    mine, theirs = dict(main.settings()), dict(other.settings()) if other is not None else {}
    rows = []
    for name in dict.fromkeys([*mine, *theirs]):
        a, b = mine.get(name, ""), theirs.get(name, "")
        rows.append((name, a, b, other is not None and name != "started" and a != b))
    return rows


def axis_range(curve: Curve, values: list[float]) -> tuple[float, float, bool] | None:
    """The y range of a plot of ``values`` and whether it clips some: the honest limits of
    :func:`~dasklbfgs.monitor.curve_rules.honest_limits` (never below a decade on a log axis
    or a tenth of the values on a linear one); a rate axis from 0 up to :data:`RATE_CLIP`
    times the rates' 90th percentile (if their largest is above it: the spike is clipped)."""
    finite = sorted(v for v in values if _finite(v) and (v > 0 or not curve.log))
    if not finite:
        return None
    if not curve.rate:
        limits = honest_limits(finite, curve.log)
        assert limits is not None, "finite values have limits"
        return (*limits, False)
    top = RATE_CLIP * finite[min(len(finite) - 1, int(0.9 * len(finite)))]
    clipped = 0 < top < finite[-1]
    return 0.0, (top if clipped else finite[-1] * 1.05) or 1.0, clipped


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


