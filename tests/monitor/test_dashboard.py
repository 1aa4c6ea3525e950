"""The "Training" dashboard page: served by the scheduler, fed by the training events."""

from __future__ import annotations

import html as html_text
import math
import urllib.request

import numpy as np
import pytest

from dasklbfgs import MLP, Logistic, Softmax, connect, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.monitor import TrainingPage
from dasklbfgs.monitor.events import TOPIC
from dasklbfgs.scoring import evaluate


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


def test_page_is_served_and_shows_each_run(datasets) -> None:
    with connect(n_workers=2, dashboard_address="127.0.0.1:0") as client:
        held_out = datasets["logistic-ill"]  # other rows of the same shape
        result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client, eval_data=held_out)
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
        loss = _points(page, "loss")
        assert list(loss["x"]) == list(range(1, result.nit + 1)) and loss["y"][-1] == result.fun
        assert page.plots["loss"].yaxis.axis_label == "objective"
        assert page.plots["loss"].xaxis.axis_label == "iteration"
        assert np.all(np.asarray(_points(page, "gnorm")["y"]) > 0) and page.plots["gnorm"].visible
        # Held-out curve of a Sandblaster run: scored at every iteration, at that iterate.
        assert list(_points(page, "heldout_metric")["y"]) == [h["eval_accuracy"] for h in result.history]
        assert page.plots["heldout_metric"].yaxis.axis_label == "held-out accuracy"
        last = evaluate(Logistic(8, l2=1e-3), result.x, held_out)
        assert result.history[-1]["eval_accuracy"] == last["accuracy"]
        assert result.history[-1]["eval_objective"] == last["objective"]
        assert "finished" in page.status.text and html_text.escape(result.message, quote=False) in page.status.text
        settings = dict(zip(page.settings.data["setting"], page.settings.data["value"]))
        assert settings["solver"] == "sandblaster" and settings["workers"] == "2" and "gtol" in settings
        assert not page.replica_panel.visible
        # Where the last evaluation's rows were computed (direct calls leave no task to show)
        workers = sorted(w.split("://")[-1] for w in client.scheduler_info()["workers"])
        assert page.worker_plot.visible and list(page.worker_plot.x_range.factors) == workers
        assert sum(page.worker_rows.data["rows"]) == datasets["logistic"].n_samples

        # A new run: the page follows it; the picker lists the runs newest first.
        dp = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=50, epochs=1,
                          eval_data=datasets["multinomial"])
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
        assert _points(page, "heldout_loss")["x"][-1] == dp.nit  # the final held-out score is drawn

        # The x toggle: wall time in seconds.
        page.x_axis.active = 1
        times = [e["time"] for _, e in client.get_events(TOPIC) if e["run"] == dp.run_id and "loss" in e]
        assert list(_points(page, "loss")["x"]) == times
        assert page.plots["loss"].xaxis.axis_label == "wall time (s)"
        page.x_axis.active = 0

        # Overlay: the Sandblaster run compared with the Downpour run, both named in the legend.
        page.picker.value = result.run_id  # as the user picks it
        page.other.value = dp.run_id
        assert list(_points(page, "loss")["x"]) == list(range(1, result.nit + 1))
        assert len(_points(page, "loss", "compare")["x"]) == len(losses)
        legend = page.plots["loss"].legend.items
        assert [item.label.value for item in legend] == [result.run_id, dp.run_id]

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
        assert page.run == result.run_id and page.picker.options[0][1] == f"{failed} (failed)"
        page.picker.value = failed
        assert "failed" in page.status.text and "RuntimeError: a model bug on a worker" in page.status.text
        assert not page.pinned  # the newest run is picked: the page follows new runs again
