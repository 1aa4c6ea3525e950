"""A "Training" page on the Dask dashboard, fed by the solvers' metric events.

The page lives in the scheduler's process and reads the events the solvers log on
:data:`dasklbfgs.monitor.events.TOPIC`, so it needs nothing from the client. The embedded cluster of
:func:`dasklbfgs.connect` registers it; for a ``dask scheduler`` add
``--preload dasklbfgs.monitor.dashboard``. It is served at ``/training`` and listed in the
dashboard's "More" menu.

It shows one run (a picker lists the runs this scheduler has seen, newest first, each by its
name, start time, solver, dataset and key settings, and follows new runs until the user picks
one; a pinned view says when a newer run exists), optionally overlaid with a second ("compare
with", on an x axis both share: :func:`~dasklbfgs.monitor.runs.shared_axis`; each line
labelled by what it is, the settings side by side with the differences marked): its status
and settings, the training objective or mini-batch loss (smoothed, the raw series faint), the
gradient norm, each
held-out figure the run records (its objective and its task's metrics, each named as
:mod:`dasklbfgs.scoring.names` names it) against iteration/global step or wall time, with a
table of their latest values, and the final scores of a run scored at its end (its end
event's ``scores``: ``result.scores``, train and test by metric); for Downpour and the
peer methods also updates/s, and for Downpour the pushes per parameter shard and the
staleness of the pushes; for Sandblaster the rows each worker computed in the last
evaluation (``rows_per_worker``: an evaluation on cached shards asks the workers directly,
so Dask's task stream does not show it); for a run whose replicas are partitioned
(``model_partitions``), the bytes each partition has sent to the others (the events'
``partition_bytes``, Sandblaster's and Downpour's). The best held-out point is marked. The
axes follow the rules of ``curves.png`` (:mod:`dasklbfgs.monitor.curve_rules`), a rate's axis
clips its spikes (:data:`~dasklbfgs.monitor.runs.RATE_CLIP`), and the layout is fixed when a
run starts: the panels a run fills are known from its start event, shown empty until their
data comes.
"""

from __future__ import annotations

import html
from typing import Any, cast

from dasklbfgs.monitor.curve_rules import smoothed, smoothing_weight
from dasklbfgs.monitor.events import TOPIC
from dasklbfgs.monitor.route import ROUTE
from dasklbfgs.monitor.runs import (
    CURVES,
    HELD_OUT_KEYS,
    RATE_CLIP,
    RunView,
    axis_range,
    runs_newest_first,
    settings_side_by_side,
    shared_axis,
    shown,
)
from dasklbfgs.scoring.names import held_out_label

__all__ = ["TrainingPage", "training_doc", "register", "ROUTE"]

REFRESH_MS = 500
NO_RUN = "none"
X_AXES = ("step", "time")  # the x toggle's choices, in its buttons' order
EMPTY = ("<b>No run yet</b>: start one with <code>dasklbfgs train --data PATH --scheduler {address}</code>, or "
         "<code>dasklbfgs.minimize(model, data, client=Client(\"{address}\"))</code> (or any solver function with "
         "that client) on this cluster; its curves appear here as it trains.")
NO_POINTS: dict[str, list[float]] = {"x": [], "y": []}


def _sentence(label: str) -> str:
    """``label`` as a title: its first letter a capital, the rest as it is (``R²``, ``RMSE``)."""
    return label[:1].upper() + label[1:]


#: the plots' titles (their y-axis labels name what each selected run reports)
TITLES = {"loss": "Training loss", "gnorm": "Gradient norm", "rate": "Updates per second",
          **{key: _sentence(held_out_label(key)) for key in HELD_OUT_KEYS}}
ROW_PX = 25  # the height of a table's row (Bokeh's DataTable default)
SLOTS = {"run": ("#1f77b4", "solid"), "compare": ("#ff7f0e", "dashed")}  # colour and dash of each run
RAW_ALPHA = 0.3  # a smoothed curve's raw series, faint (as curves.png draws it)


class TrainingPage:
    """The Bokeh models of the page; :meth:`update` reads the scheduler's events."""

    def __init__(self, scheduler: Any) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import ColumnDataSource

        # from their modules: bokeh.models.widgets builds its __all__ from its submodules' at
        # run time, so a type checker does not see the names bokeh.models re-exports from it
        from bokeh.models.widgets.groups import RadioButtonGroup
        from bokeh.models.widgets.inputs import Select
        from bokeh.models.widgets.markups import Div
        from bokeh.models.widgets.tables import TableColumn

        self.scheduler = scheduler
        self.runs: list[RunView] = []
        self.pinned = False  # the user picked a run: stop following new ones
        self.seen: tuple[int, float] = (0, 0.0)  # number and time of the events last read
        self.updating = False  # the page itself is changing the pickers
        self.picker = Select(title="run (newest first)", options=[], width=560, name="run-picker")
        no_run: list[str | tuple[Any, str]] = [NO_RUN]  # (a Select's options: values, or (value, label) pairs)
        self.other = Select(title="compare with", options=no_run, value=NO_RUN, width=560, name="compare-picker")
        self.x_axis = RadioButtonGroup(labels=["progress (iteration, global step or epoch)", "wall time (s)"],
                                       active=0)
        address = getattr(scheduler, "address", "") or "SCHEDULER"
        self.status = Div(text=EMPTY.format(address=address), sizing_mode="stretch_width", name="status")
        self.settings = ColumnDataSource({"differs": [], "setting": [], "run": [], "compare": []}, name="settings")
        self.settings_columns = [TableColumn(field="differs", title="", width=20),
                                 TableColumn(field="setting", title="setting", width=140),
                                 TableColumn(field="run", title="value", width=420),
                                 TableColumn(field="compare", title="compared with", width=420, visible=False)]
        table = _table(self.settings, self.settings_columns, height=260, sizing_mode="stretch_width")
        # named, so that a browser (and the browser test) can find each curve's data: the raw
        # points, their smoothed line (noisy curves only) and the best held-out point
        self.sources = {(slot, name): ColumnDataSource(dict(NO_POINTS), name=f"{slot}-{name}")
                        for slot in SLOTS for name in CURVES}
        self.smooth = {(slot, name): ColumnDataSource(dict(NO_POINTS), name=f"{slot}-{name}-smoothed")
                       for slot in SLOTS for name in CURVES}
        self.best = {(slot, name): ColumnDataSource(dict(NO_POINTS), name=f"{slot}-{name}-best")
                     for slot in SLOTS for name in CURVES}
        self.renderers: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.legend_items: dict[tuple[str, str, str], Any] = {}
        self.plots = {name: self._line_plot(name) for name in CURVES}
        self.shards = ColumnDataSource({"shard": [], "pushes": []})
        self.staleness = ColumnDataSource({"staleness": [], "pushes": []})
        self.shard_plot = self._bar_plot("Pushes per parameter shard", self.shards, "shard", "pushes",
                                         "parameter shard", "pushes applied")
        self.staleness_plot = self._bar_plot("Staleness of the pushes (parameter shard 0)", self.staleness,
                                             "staleness", "pushes", "staleness (versions behind)", "pushes")
        self.worker_rows = ColumnDataSource({"worker": [], "rows": []})
        self.worker_plot = self._bar_plot("Rows each worker computed in the last evaluation", self.worker_rows,
                                          "worker", "rows", "worker", "rows", categories=True)
        self.held_out = ColumnDataSource({"metric": [], "value": [], "step": []}, name="held-out-latest")
        self.held_out_table = _table(self.held_out, [
            TableColumn(field="metric", title="held-out", width=220), TableColumn(field="value", title="latest"),
            TableColumn(field="step", title="at")], width=420)
        self.scores = ColumnDataSource({"metric": [], "train": [], "test": []}, name="final-scores")
        self.scores_table = _table(self.scores, [
            TableColumn(field="metric", title="metric", width=240), TableColumn(field="train", title="train"),
            TableColumn(field="test", title="test")], width=560)
        self.scores_panel = column(Div(text="<b>Final scores</b> (of the training and held-out data, at the end)"),
                                   self.scores_table)
        self.partitions = ColumnDataSource({"partition": [], "mib": []})
        self.partition_plot = self._bar_plot("Bytes each partition of the replicas sent to the others",
                                             self.partitions, "partition", "mib", "partition", "MiB sent")
        self.picker.on_change("value", self._picked)
        self.other.on_change("value", self._redraw)
        self.x_axis.on_change("active", self._redraw)
        p = self.plots
        self.replica_panel = row(p["rate"], self.shard_plot, self.staleness_plot, sizing_mode="stretch_width")
        self.root = column(row(self.picker, self.other, self.x_axis), self.status,
                           row(p["loss"], p["gnorm"], sizing_mode="stretch_width"),
                           row(*[p[key] for key in HELD_OUT_KEYS], sizing_mode="stretch_width"),
                           row(self.held_out_table, self.scores_panel),
                           self.replica_panel, row(self.worker_plot, self.partition_plot, sizing_mode="stretch_width"),
                           table,
                           sizing_mode="stretch_width")
        self._draw_empty()

    def _line_plot(self, name: str) -> Any:
        """A plot of curve ``name``: for each run its raw points, a smoothed line (a noisy
        curve's) and its best held-out point; the legend below the plot, off the data."""
        from bokeh.models import LogTicker, LogTickFormatter, Range1d
        from bokeh.models.annotations.legends import Legend, LegendItem
        from bokeh.plotting import figure

        log = CURVES[name].log
        low, high = _UNIT_RANGE[log]
        fig = figure(title=TITLES[name], height=340, sizing_mode="stretch_width", y_range=Range1d(start=low, end=high),
                     y_axis_type="log" if log else "linear", tools="pan,wheel_zoom,box_zoom,reset,save")
        fig.xaxis.axis_label_text_font_style = "normal"
        fig.xaxis.name = f"x-axis-{name}"  # (named for a browser, as the sources are)
        if log:  # labels at 1, 2 and 5 times a power of ten when the range spans less than a few decades
            fig.yaxis.ticker = LogTicker(mantissas=[1, 2, 5])
            fig.yaxis.formatter = LogTickFormatter()
        for slot, (colour, dash) in SLOTS.items():
            raw: Any = fig.line("x", "y", source=self.sources[slot, name], line_width=2, color=colour, line_dash=dash)
            dots = fig.scatter("x", "y", source=self.sources[slot, name], size=4, color=colour)
            smooth: Any = fig.line("x", "y", source=self.smooth[slot, name], line_width=2.5, color=colour,
                                   line_dash=dash)
            best: Any = fig.scatter("x", "y", source=self.best[slot, name], marker="star", size=16, color=colour,
                               line_color="black")
            self.renderers[slot, name] = (raw, dots, smooth, best)
            self.legend_items[slot, name, "line"] = LegendItem(label="", renderers=[raw, smooth])
            self.legend_items[slot, name, "best"] = LegendItem(label="", renderers=[best])
        legend: Any = Legend(items=[], name=f"legend-{name}", visible=False, label_text_font_size="11px", spacing=0,
                             border_line_alpha=0)
        legend.padding = legend.margin = 4
        fig.add_layout(legend, "below")
        return fig

    @staticmethod
    def _bar_plot(title: str, source: Any, x: str, y: str, x_label: str, y_label: str,
                  categories: bool = False) -> Any:
        """Bars over whole numbers (shards, staleness, partitions), or over named
        ``categories`` (workers: the names are set as they are drawn)."""
        from bokeh.models import DataRange1d
        from bokeh.plotting import figure

        categorical: dict[str, Any] = {"x_range": []} if categories else {}  # factors: set as drawn
        fig = figure(title=title, height=280, sizing_mode="stretch_width", tools="save", x_axis_label=x_label,
                     y_axis_label=y_label, **categorical)
        fig.vbar(x=x, top=y, source=source, width=0.8)
        cast(DataRange1d, fig.y_range).start = 0  # a figure's default y range
        if not categories:
            # bokeh's stubs type the splat of the x axes' tickers as one Axis's ``Ticker | Sequence[float]``;
            # it sets the attribute on each of them (a linear axis's BasicTicker)
            fig.xaxis.ticker.min_interval = 1  # type: ignore[union-attr]
        return fig

    # -- reading the events -----------------------------------------------------------------

    @property
    def run(self) -> str | None:
        """The selected run's id (None before any run)."""
        return self.picker.value or None

    def view(self, run_id: str | None) -> RunView | None:
        return next((r for r in self.runs if r.run == run_id), None)

    def update(self) -> None:
        """Read the events again and redraw (called every REFRESH_MS by the page)."""
        events = self.scheduler.get_events(TOPIC)
        if not events or (len(events), events[-1][0]) == self.seen:
            return  # nothing new: the scheduler's thread has better things to do
        self.seen = (len(events), events[-1][0])
        self.runs = runs_newest_first([message for _, message in events])
        options: list[str | tuple[Any, str]] = [(r.run, r.label()) for r in self.runs]
        self.updating = True
        try:
            if options != self.picker.options:
                self.picker.options = options
                self.other.options = [(NO_RUN, "none"), *options]
            if not self.pinned or self.view(self.picker.value) is None:
                self.picker.value = self.runs[0].run
        finally:
            self.updating = False
        self.draw()

    def _picked(self, attr: str, old: str, new: str) -> None:
        if not self.updating:  # the user's choice: follow new runs again only if it is the newest
            self.pinned = new != self.runs[0].run
        self.draw()

    def _redraw(self, attr: str, old: Any, new: Any) -> None:
        self.draw()

    # -- drawing ------------------------------------------------------------------------------

    def draw(self) -> None:
        """Show the selected run (and the one to compare with) as the x toggle says."""
        main = self.view(self.run)
        if main is None:
            self._draw_empty()
            return
        other = self.view(self.other.value)
        active = self.x_axis.active
        assert active is not None, "a radio group the page starts with a button active keeps one active"
        x, x_title = shared_axis(main, other, X_AXES[active])
        shown_runs = {"run": main, "compare": other}
        for name, curve in CURVES.items():
            fig = self.plots[name]
            fig.visible = any(run is not None and run.fills(name) for run in shown_runs.values())
            items, labels, values = [], [], []
            for slot, run in shown_runs.items():
                if run is not None and not run.fills(name):
                    run = None  # not the run's panel (a Sandblaster run compared on the replicas' updates/s)
                points = run.points(curve, x) if run is not None else NO_POINTS
                weight = smoothing_weight(len(points["y"])) if run is not None and run.is_noisy(curve) else 0.0
                smooth = {"x": points["x"], "y": smoothed(points["y"], weight).tolist()} if weight else NO_POINTS
                best = run.best(curve, x) if run is not None else None
                _set(self.sources[slot, name], points)
                _set(self.smooth[slot, name], smooth)
                _set(self.best[slot, name], {"x": [best[0]], "y": [best[1]]} if best else NO_POINTS)
                raw, dots, _, _ = self.renderers[slot, name]
                raw.glyph.line_alpha, raw.glyph.line_width = (RAW_ALPHA, 1) if weight else (1.0, 2)
                dots.visible = not weight
                if run is not None and points["x"]:
                    label = run.series_label(curve, bool(weight))
                    items.append(_labelled(self.legend_items[slot, name, "line"], label))
                    labels.append(curve.label(run))
                    values += points["y"]
                if best is not None:
                    items.append(_labelled(self.legend_items[slot, name, "best"], best[2]))
            legend = fig.legend[0]
            if legend.items != items:
                legend.items = items
            legend.visible = bool(items)
            fig.yaxis.axis_label = " / ".join(dict.fromkeys(labels))
            fig.xaxis.axis_label = x_title
            self._set_range(fig, curve, values)
        self.status.text = self._status(main, other)
        self._draw_settings(main, other)
        self._draw_scores(main)
        self._draw_replica_panel(main, other)
        self._draw_workers(main)
        self._draw_partitions(main)

    def _set_range(self, fig: Any, curve: Any, values: list[float]) -> None:
        """The y range of :func:`~dasklbfgs.monitor.runs.axis_range` (set when it changes: a
        user's zoom stays until the data moves), and a note on a rate axis that clips."""
        limits = axis_range(curve, values)
        if limits is None:
            return
        low, high, clipped = limits
        if (fig.y_range.start, fig.y_range.end) != (low, high):
            fig.y_range.start, fig.y_range.end = low, high
        if clipped:
            fig.yaxis.axis_label += f" (axis clipped at {RATE_CLIP:g}x the 90th percentile)"

    def _status(self, main: RunView, other: RunView | None) -> str:
        """The run's status line; the compared run's; and, when the view is pinned, whether a newer run exists."""
        text = main.status()
        if other is not None:
            text += f"<br>compared with {other.status()}"
        if self.pinned and self.runs and self.runs[0] is not main:
            newer = html.escape(self.runs[0].label(), quote=False)
            text += (f"<br><b style='color:#c60'>a newer run exists</b>: {newer}; pick it to follow new runs "
                     "again")
        return text

    def _draw_settings(self, main: RunView, other: RunView | None) -> None:
        """Both runs' settings side by side, the ones that differ marked."""
        rows = settings_side_by_side(main, other)
        self.settings.data = {"differs": ["≠" if r[3] else "" for r in rows], "setting": [r[0] for r in rows],
                              "run": [r[1] for r in rows], "compare": [r[2] for r in rows]}
        _, _, mine, theirs = self.settings_columns
        mine.title = main.name
        theirs.visible = other is not None
        theirs.title = other.name if other is not None else "compared with"

    def _draw_empty(self) -> None:
        """No run yet: the status says how to start one, the first row of plots stays, empty."""
        for name, fig in self.plots.items():
            fig.visible = name == "loss"
        for panel in (self.held_out_table, self.scores_panel, self.replica_panel, self.worker_plot,
                      self.partition_plot):
            panel.visible = False

    def _draw_scores(self, run: RunView) -> None:
        """The latest value of each held-out figure, and the final scores if the run has them."""
        latest = run.held_out()
        self.held_out_table.visible = run.fills("held_out")
        self.held_out_table.columns[2].title = run.x_label
        self.held_out_table.height = ROW_PX * (len(latest) + 1) + 5  # every row, no scroll bar
        self.held_out.data = {"metric": [r[0] for r in latest], "value": [shown(r[1]) for r in latest],
                              "step": [shown(r[2]) for r in latest]}
        scores = run.final_scores()
        self.scores_panel.visible = run.fills("scores")
        self.scores_table.height = ROW_PX * (len(scores) + 1) + 5
        self.scores.data = {"metric": [r[0] for r in scores], "train": [shown(r[1]) for r in scores],
                            "test": [shown(r[2]) for r in scores]}

    def _draw_replica_panel(self, run: RunView, other: RunView | None) -> None:
        """Downpour's pushes per shard and staleness, the replica methods' updates/s (either run's)."""
        self.replica_panel.visible = run.fills("rate") or (other is not None and other.fills("rate"))
        pushes = next((e["pushes_per_shard"] for e in reversed(run.steps) if "pushes_per_shard" in e), None)
        self.shard_plot.visible = run.fills("shards")
        if pushes is not None:
            self.shards.data = {"shard": list(range(len(pushes))), "pushes": list(pushes)}
        staleness = next((e["staleness"] for e in reversed(run.steps) if "staleness" in e), None)
        self.staleness_plot.visible = run.fills("staleness")
        if staleness is not None:
            ages = sorted(staleness, key=int)
            self.staleness.data = {"staleness": [int(a) for a in ages], "pushes": [staleness[a] for a in ages]}

    def _draw_workers(self, run: RunView) -> None:
        """The rows each worker computed in the run's last evaluation (Sandblaster)."""
        rows = next((e["rows_per_worker"] for e in reversed(run.steps) if "rows_per_worker" in e), None)
        self.worker_plot.visible = run.fills("workers")  # empty for streamed rows: any worker reads any portion
        if rows:
            names = [worker.split("://")[-1] for worker in sorted(rows)]
            self.worker_plot.x_range.factors = names
            self.worker_rows.data = {"worker": names, "rows": [rows[w] for w in sorted(rows)]}

    def _draw_partitions(self, run: RunView) -> None:
        """The bytes each partition sent (runs with partitioned replicas only)."""
        sent = next((e["partition_bytes"] for e in reversed(run.steps) if "partition_bytes" in e), None)
        self.partition_plot.visible = run.fills("partitions")
        if sent is not None:
            self.partitions.data = {"partition": list(range(len(sent))), "mib": [b / 2**20 for b in sent]}


_UNIT_RANGE = {False: (0.0, 1.0), True: (0.1, 1.0)}  # a plot's y range before it has data


def _table(source: Any, columns: list[Any], **options: Any) -> Any:
    """A DataTable of ``source`` (no index column) whose cells follow the source's data.

    BokehJS (3.9) redraws a table's cells when the table's CDSView changes, and the view changes
    only when the number of rows does: data replaced by as many rows (another run's held-out
    figures, a live run's latest ones, the settings of another run of the same solver) leaves the
    old cells on screen, through scrolls and resizes. A change to the table itself (a column's
    title, its height, showing it) rebuilds its grid, but from the data of that moment: the old,
    when the change comes before the data. So each replacement of the data announces a change of
    the view, as a new number of rows does, and the table redraws its cells from the new data.
    """
    from bokeh.models import CustomJS
    from bokeh.models.widgets.tables import DataTable

    table = DataTable(source=source, columns=columns, index_position=None, **options)
    source.js_on_change("data", CustomJS(args={"view": table.view}, code="view.change.emit()"))
    return table


def _set(source: Any, data: dict[str, list[float]]) -> None:
    """Send ``data`` to the browser only if it changed."""
    if data != dict(source.data):
        source.data = data


def _labelled(item: Any, label: str) -> Any:
    """The legend item with ``label`` (set only if it changed)."""
    from bokeh.core.properties import value

    if item.label != value(label):
        item.label = value(label)
    return item


def training_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """Bokeh document factory in the form the Dask dashboard expects: the page inside the
    dashboard's own template, so that its navigation bar stays."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    page = TrainingPage(scheduler)
    page.update()
    doc.title = "dasklbfgs: Training"
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, REFRESH_MS)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
    doc.theme = BOKEH_THEME


def register() -> None:
    """Add the page to the dashboard applications (before the scheduler starts)."""
    from distributed.dashboard.scheduler import applications

    applications[ROUTE] = training_doc
    applications["/individual-training"] = training_doc  # listed in the "More" menu


def dask_setup(scheduler: Any) -> None:  # ``dask scheduler --preload dasklbfgs.monitor.dashboard``
    return None


register()  # importing this module (a preload does) registers the page
