"""The "Training" dashboard page: served by the scheduler, fed by the training events."""

from __future__ import annotations

import html as html_text
import math
import urllib.request

import numpy as np
import pytest

from dasklbfgs import MLP, LeastSquares, Logistic, Softmax, connect, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.monitor import TrainingPage
from dasklbfgs.monitor.events import TOPIC
from dasklbfgs.monitor.runs import dataset_label
from dasklbfgs.monitor.runs import shown as as_shown
from dasklbfgs.scoring import evaluate
from dasklbfgs.scoring.names import METRIC_LABELS


class FailsOnWorkers(Logistic):
    """A Logistic model whose gradient raises on the workers after a few calls."""

    calls = 0

    def loss_grad_sum(self, params, X, y):
        FailsOnWorkers.calls += 1
        if FailsOnWorkers.calls > 6:
            raise RuntimeError("a model bug on a worker")
        return super().loss_grad_sum(params, X, y)


def _points(page, name, slot="run"):
    return page.sources[slot, name].data


def _table(source, *columns):
    """A table of the page as {first column: (the other columns' texts)}."""
    data = source.data
    return {key: tuple(data[c][i] for c in columns) for i, key in enumerate(data["metric"])}


def _number(text):
    return float(text.replace(",", ""))


def test_page_is_served_and_shows_each_run(datasets) -> None:
    with connect(n_workers=2, dashboard_address="127.0.0.1:0") as client:
        # Before any run: the page says how to start one on this cluster.
        empty = TrainingPage(client.cluster.scheduler)
        empty.update()
        assert "No run yet" in empty.status.text and client.scheduler.address in empty.status.text
        assert [name for name, fig in empty.plots.items() if fig.visible] == ["loss"]
        # BokehJS redraws a DataTable's cells only on a change of its CDSView, which comes by itself
        # only with a new number of rows: each table's source announces one on every new data (what
        # the browser then draws: tests/monitor/test_dashboard_browser.py)
        from bokeh.models.widgets.tables import DataTable

        tables = list(empty.root.select({"type": DataTable}))
        assert len(tables) == 3  # the held-out figures, the final scores and the settings
        for table in tables:
            [redraw] = table.source.js_property_callbacks["change:data"]
            assert redraw.args == {"view": table.view} and redraw.code == "view.change.emit()"
        held_out = datasets["logistic-ill"]  # other rows of the same shape
        result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client, eval_data=held_out,
                                   score=True, name="first <fit>")
        base = client.dashboard_link.rsplit("/", 1)[0]
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}/training", timeout=30) as response:
            html = response.read().decode()
        assert response.status == 200 and "bokeh" in html.lower()
        assert 'class="navbar"' in html  # Dask's navigation bar stays (the title comes with the document)
        with urllib.request.urlopen(f"{base}/status", timeout=30) as response:
            assert "individual-training" in response.read().decode()  # in the "More" menu

        # The page's data, built in the scheduler's process as the dashboard builds it.
        page = TrainingPage(client.cluster.scheduler)
        page.update()
        assert page.run == result.run_id
        assert page.picker.options[0][1].startswith("first <fit> · ") and "<b>first &lt;fit&gt;</b>" in page.status.text
        loss = _points(page, "loss")
        assert list(loss["x"]) == list(range(1, result.nit + 1)) and loss["y"][-1] == result.fun
        assert page.plots["loss"].yaxis.axis_label == "objective"
        assert page.plots["loss"].xaxis.axis_label == "iteration"
        assert np.all(np.asarray(_points(page, "gnorm")["y"]) > 0) and page.plots["gnorm"].visible
        # Held-out curves of a Sandblaster run: scored at every iteration, at that iterate, each named.
        assert list(_points(page, "eval_accuracy")["y"]) == [h["eval_accuracy"] for h in result.history]
        assert list(_points(page, "eval_objective")["y"]) == [h["eval_objective"] for h in result.history]
        assert page.plots["eval_accuracy"].yaxis.axis_label == "held-out accuracy"
        assert page.plots["eval_accuracy"].title.text == "Held-out accuracy"
        assert page.plots["eval_objective"].yaxis.axis_label == "held-out objective"
        assert not page.plots["eval_rmse"].visible and not page.plots["eval_r2"].visible  # not this task's
        last = evaluate(Logistic(8, l2=1e-3), result.x, held_out)
        assert result.history[-1]["eval_accuracy"] == last["accuracy"]
        # (the run's scoring adds the rows' sums by portions, evaluate's by shards: the last bits differ)
        assert result.history[-1]["eval_objective"] == pytest.approx(last["objective"], rel=1e-12)
        # ... and the latest values by name, at the last iteration
        latest = _table(page.held_out, "value", "step")
        assert list(latest) == ["held-out objective", "held-out accuracy"] and page.held_out_table.visible
        assert _number(latest["held-out accuracy"][0]) == pytest.approx(last["accuracy"], rel=1e-5)
        assert _number(latest["held-out objective"][0]) == pytest.approx(last["objective"], rel=1e-5)
        assert latest["held-out accuracy"][1] == str(result.nit)
        # The final scores (result.scores) by name, train beside test, the confusion matrix a row per true class.
        scores = _table(page.scores, "train", "test")
        assert page.scores_panel.visible and {"log-loss", "accuracy", "ROC AUC", "F1", "rows"} <= set(scores)
        for name, train in result.scores["train"].items():
            test = result.scores["test"][name]
            if name == "confusion_matrix":
                for k, (train_row, test_row) in enumerate(zip(train, test)):
                    shown = scores[f"confusion matrix, true class {k}"]
                    assert [[_number(v) for v in text.split(" | ")] for text in shown] == [train_row, test_row]
            else:
                assert [_number(text) for text in scores[METRIC_LABELS[name]]] == [
                    pytest.approx(train, rel=1e-5), pytest.approx(test, rel=1e-5)]
        assert len(scores) == len(result.scores["train"]) - 1 + 2  # the matrix's 2 rows
        assert scores["accuracy"] != scores["log-loss"]
        assert "finished" in page.status.text and html_text.escape(result.message, quote=False) in page.status.text
        settings = dict(zip(page.settings.data["setting"], page.settings.data["run"]))
        assert settings["solver"] == "sandblaster" and settings["workers"] == "2" and "gtol" in settings
        assert not page.replica_panel.visible
        # Where the last evaluation's rows were computed (direct calls leave no task to show)
        workers = sorted(w.split("://")[-1] for w in client.scheduler_info()["workers"])
        assert page.worker_plot.visible and list(page.worker_plot.x_range.factors) == workers
        assert sum(page.worker_rows.data["rows"]) == datasets["logistic"].n_samples

        # A new run: the page follows it; the picker lists the runs newest first.
        # (long enough for several polls of its progress, however fast the machine: 600 steps)
        dp = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=10, epochs=1,
                          eval_data=datasets["multinomial"], poll_interval=0.01)
        page.update()
        assert page.run == dp.run_id
        assert [run for run, _ in page.picker.options] == [dp.run_id, result.run_id]
        assert page.plots["loss"].yaxis.axis_label == "mini-batch loss"
        assert page.plots["loss"].xaxis.axis_label == "global step" and not page.plots["gnorm"].visible
        assert list(page.shards.data["pushes"]) == dp.stats["pushes_per_shard"]
        assert sum(page.staleness.data["pushes"]) > 0 and page.replica_panel.visible
        assert len(_points(page, "rate")["y"]) >= 2 and min(_points(page, "rate")["y"]) >= 0
        assert "finished" in page.status.text and html_text.escape(dp.message, quote=False) in page.status.text
        # The finished event has no mini-batch loss: no nan point is drawn, and no "nan" is shown.
        losses = _points(page, "loss")["y"]
        assert losses and all(math.isfinite(v) for v in losses) and "nan" not in page.status.text
        assert _points(page, "eval_objective")["x"][-1] == dp.nit  # the final held-out score is drawn
        assert not page.scores_panel.visible  # not scored at the end

        # The x toggle: wall time in seconds.
        page.x_axis.active = 1
        times = [e["time"] for _, e in client.get_events(TOPIC) if e["run"] == dp.run_id and "loss" in e]
        assert list(_points(page, "loss")["x"]) == times
        assert page.plots["loss"].xaxis.axis_label == "wall time (s)"
        page.x_axis.active = 0

        # Overlay: the Sandblaster run compared with the Downpour run, on the axis they share
        # (iterations and global steps differ: wall time), each line named by what it is.
        page.picker.value = result.run_id  # as the user picks it
        page.other.value = dp.run_id
        assert list(_points(page, "loss")["x"]) == [h["time"] for h in result.history]
        assert page.plots["loss"].xaxis.axis_label == (
            f"wall time (s) (shared: first <fit> counts iterations, {dp.run_id} global steps)")
        assert page.plots["loss"].yaxis.axis_label == "objective / mini-batch loss"
        assert len(_points(page, "loss", "compare")["x"]) == len(losses)
        legend = page.plots["loss"].legend[0].items
        noisy = "smoothed" if len(losses) >= 20 else "noisy"
        assert [item.label.value for item in legend] == ["first <fit>: objective (full batch)",
                                                         f"{dp.run_id}: mini-batch loss ({noisy})"]
        # only the lines drawn are in a legend: Downpour has no gradient norm; the best held-out points are marked
        assert [item.label.value for item in page.plots["gnorm"].legend[0].items] == [
            "first <fit>: gradient max-norm"]
        assert page.plots["rate"].visible and not _points(page, "rate")["x"]  # Downpour's panel: no Sandblaster line
        assert [item.label.value for item in page.plots["rate"].legend[0].items] == [
            f"{dp.run_id}: updates/s (pushes to the shards)"]
        best = max(h["eval_accuracy"] for h in result.history)
        at = next(h["step"] for h in result.history if h["eval_accuracy"] == best)
        assert list(_points(page, "eval_accuracy")["y"]).count(best) >= 1
        assert page.best["run", "eval_accuracy"].data["y"] == [best]
        assert f"first <fit>: best held-out accuracy {as_shown(best)} at iteration {at}" in [
            item.label.value for item in page.plots["eval_accuracy"].legend[0].items]
        settings = page.settings.data
        row = settings["setting"].index("solver")
        assert (settings["run"][row], settings["compare"][row], settings["differs"][row]) == (
            "sandblaster", "downpour", "≠")
        page.other.value = "none"

        # A run with partitioned replicas: the bytes each partition sent to the others.
        assert not page.partition_plot.visible
        mlp = sandblaster_lbfgs(MLP(8, (6,), 3), datasets["multinomial"], client=client, maxiter=3,
                                model_partitions=2)
        page.update()
        page.picker.value = mlp.run_id
        sent = [p["bytes_sent"] for p in mlp.partitions["replicas"][0]]
        assert page.partition_plot.visible and min(sent) > 0
        assert list(page.partitions.data["mib"]) == [b / 2**20 for b in sent]
        # Downpour's partitions count their bytes in their mailboxes: the polls' events carry
        # them while the run goes on, the same meaning as Sandblaster's
        dp_mlp = downpour_sgd(MLP(8, (6,), 3), datasets["multinomial"], client=client, batch_size=50, epochs=1,
                              n_replicas=1, model_partitions=2)
        events = [e for _, e in client.get_events(TOPIC) if e["run"] == dp_mlp.run_id and "partition_bytes" in e]
        live = [e["partition_bytes"] for e in events if not e.get("finished")]
        assert live and min(live[-1]) > 0 and np.all(np.diff(live, axis=0) >= 0)  # growing during the run
        sent = [p["bytes_sent"] for p in dp_mlp.partitions["replicas"][0]]
        assert events[-1]["finished"] and list(events[-1]["partition_bytes"]) == sent
        page.update()
        page.picker.value = dp_mlp.run_id
        assert page.partition_plot.visible and list(page.partitions.data["mib"]) == [b / 2**20 for b in sent]
        page.picker.value = result.run_id

        # A run whose solver raises: the failed end event reaches the page, which stays on
        # the run the user picked until the user picks the new one.
        with pytest.raises(RuntimeError, match="a model bug on a worker"):
            sandblaster_lbfgs(FailsOnWorkers(8, l2=1e-3), datasets["logistic"], client=client)
        page.update()
        failed = page.picker.options[0][0]
        label = page.picker.options[0][1]
        assert page.run == result.run_id and label.startswith(f"{failed} · ") and label.endswith(" (failed)")
        assert f" · sandblaster · {dataset_label(datasets['logistic'].url)} · " in label  # the dataset's path's end
        assert "a newer run exists" in page.status.text and label in page.status.text  # pinned, and told so
        page.picker.value = failed
        assert "failed" in page.status.text and "RuntimeError: a model bug on a worker" in page.status.text
        assert not page.pinned  # the newest run is picked: the page follows new runs again

        # A regression run: its held-out RMSE and R² each in a plot of its own, named; its final scores.
        reg = sandblaster_lbfgs(LeastSquares(8), datasets["regression"], client=client, maxiter=4,
                                eval_data=datasets["regression-ill"], score=True)
        page.update()
        assert page.run == reg.run_id
        for key, label in (("eval_rmse", "held-out RMSE"), ("eval_r2", "held-out R²")):
            assert page.plots[key].visible and page.plots[key].yaxis.axis_label == label
            assert list(_points(page, key)["y"]) == [h[key] for h in reg.history]
        assert not page.plots["eval_accuracy"].visible
        latest = _table(page.held_out, "value")
        assert list(latest) == ["held-out objective", "held-out RMSE", "held-out R²"]
        assert _number(latest["held-out R²"][0]) == pytest.approx(reg.history[-1]["eval_r2"], rel=1e-5)
        scores = _table(page.scores, "train", "test")
        assert list(scores) == ["objective", "rows", "RMSE", "MAE", "R²", "explained variance", "mean deviance", "D²"]
        assert [_number(text) for text in scores["R²"]] == [pytest.approx(reg.scores[split]["r2"], rel=1e-5)
                                                          for split in ("train", "test")]
