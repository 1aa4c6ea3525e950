"""The "Training" dashboard page: served by the scheduler, fed by the training events."""

from __future__ import annotations

import urllib.request

import numpy as np

from dasklbfgs import Logistic, Softmax, connect, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.models.metrics import evaluate_model
from dasklbfgs.monitor import TrainingPage


def test_page_is_served_and_holds_the_run(datasets) -> None:
    with connect(n_workers=2, dashboard_address="127.0.0.1:0") as client:
        held_out = datasets["logistic-ill"]  # other rows of the same shape
        result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client, eval_data=held_out)
        base = client.dashboard_link.rsplit("/", 1)[0]
        assert base.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{base}/training", timeout=30) as response:
            html = response.read().decode()
        assert response.status == 200 and "dasklbfgs: Training" in html and "bokeh" in html.lower()
        with urllib.request.urlopen(f"{base}/status", timeout=30) as response:
            assert "individual-training" in response.read().decode()  # in the "More" menu

        # The page's data, built in the scheduler's process as the dashboard builds it.
        page = TrainingPage(client.cluster.scheduler)
        page.update()
        assert page.run == result.run_id
        assert list(page.curve.data["x"]) == list(range(1, result.nit + 1))
        assert page.curve.data["objective"][-1] == result.fun
        assert np.all(np.asarray(page.curve.data["gnorm"]) > 0)
        # Held-out curve of a Sandblaster run: scored at every iteration, at that iterate.
        assert list(page.curve.data["heldout"]) == [h["eval_accuracy"] for h in result.history]
        last = evaluate_model(Logistic(8, l2=1e-3), result.x, held_out)
        assert result.history[-1]["eval_accuracy"] == last["accuracy"]
        assert result.history[-1]["eval_objective"] == last["objective"]

        dp = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=50, epochs=1)
        page.update()
        assert page.run == dp.run_id
        assert list(page.shards.data["pushes"]) == dp.stats["pushes_per_shard"]
        assert "finished" in page.summary.text
