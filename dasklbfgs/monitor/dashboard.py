"""A "Training" page on the Dask dashboard, fed by the solvers' metric events.

The page lives in the scheduler's process and reads the events the solvers log on
:data:`dasklbfgs.monitor.events.TOPIC`, so it needs nothing from the client. The embedded cluster of
:func:`dasklbfgs.connect` registers it; for a ``dask scheduler`` add
``--preload dasklbfgs.monitor.dashboard``. It is served at ``/training`` and listed in the
dashboard's "More" menu.
"""

from __future__ import annotations

from typing import Any

from dasklbfgs.models.metrics import SCORES
from dasklbfgs.monitor.events import TOPIC

__all__ = ["TrainingPage", "training_doc", "register", "ROUTE"]

ROUTE = "/training"
REFRESH_MS = 500
#: column of the curves -> the event keys that fill it, the first one present
_COLUMNS = {"x": ("nit", "step"), "objective": ("fun", "train_loss"), "gnorm": ("gnorm",),
            "heldout": tuple(f"eval_{name}" for name in SCORES), "time": ("time",)}


class TrainingPage:
    """Bokeh models for the latest run: objective, gradient norm, held-out metric, shards."""

    def __init__(self, scheduler: Any) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import ColumnDataSource, DataTable, Div, TableColumn
        from bokeh.plotting import figure

        self.scheduler = scheduler
        self.curve = ColumnDataSource({column: [] for column in _COLUMNS})
        self.shards = ColumnDataSource({"shard": [], "pushes": []})
        self.summary = Div(text="No dasklbfgs training has logged events yet.")
        self.run: str | None = None

        def plot(title: str, y: str, y_axis_type: str = "linear"):
            fig = figure(title=title, height=260, width=420, y_axis_type=y_axis_type,
                         x_axis_label="iteration / global step", tools="pan,wheel_zoom,box_zoom,reset")
            fig.line("x", y, source=self.curve, line_width=2)
            fig.scatter("x", y, source=self.curve, size=4)
            return fig

        self.objective_plot = plot("Objective (Sandblaster) / training loss (Downpour)", "objective")
        self.gnorm_plot = plot("Gradient max-norm", "gnorm", "log")
        self.heldout_plot = plot("Held-out metric", "heldout")
        table = DataTable(source=self.shards, height=160, width=420, columns=[
            TableColumn(field="shard", title="parameter shard"), TableColumn(field="pushes", title="pushes applied")])
        self.root = column(self.summary, row(self.objective_plot, self.gnorm_plot),
                           row(self.heldout_plot, table), sizing_mode="stretch_width")

    def update(self) -> None:
        """Show the newest run's events (called every REFRESH_MS by the page)."""
        events = [message for _, message in self.scheduler.get_events(TOPIC)]
        if not events:
            return
        self.run = events[-1]["run"]
        mine = [e for e in events if e["run"] == self.run]
        nan = float("nan")
        data = {column: [next((e[k] for k in keys if k in e), nan) for e in mine]
                for column, keys in _COLUMNS.items()}
        if data["x"] != list(self.curve.data["x"]):
            self.curve.data = data
        last = mine[-1]
        pushes = last.get("pushes_per_shard")
        if pushes is not None:
            self.shards.data = {"shard": list(range(len(pushes))), "pushes": list(pushes)}
        state = "finished" if last.get("finished") else "running or done"
        self.summary.text = (
            f"<b>{self.run}</b> ({last['solver']}, {state}): {len(mine)} updates, "
            f"latest objective {data['objective'][-1]:.6g} at {data['x'][-1]} after {last.get('time', nan):.1f} s"
        )


def training_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """Bokeh document factory in the form the Dask dashboard expects."""
    page = TrainingPage(scheduler)
    page.update()
    doc.title = "dasklbfgs: Training"
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, REFRESH_MS)


def register() -> None:
    """Add the page to the dashboard applications (before the scheduler starts)."""
    from distributed.dashboard.scheduler import applications

    applications[ROUTE] = training_doc
    applications["/individual-training"] = training_doc  # listed in the "More" menu


def dask_setup(scheduler: Any) -> None:  # ``dask scheduler --preload dasklbfgs.monitor.dashboard``
    return None


register()  # importing this module (a preload does) registers the page
