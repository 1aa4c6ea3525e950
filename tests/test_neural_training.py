"""Both solvers train each neural model on its workload, on a real LocalCluster."""

from __future__ import annotations

import pytest

from dasklbfgs import downpour_sgd, make_dataset, sandblaster_lbfgs
from dasklbfgs.models import model_for_dataset
from dasklbfgs.models.metrics import evaluate_model

WORKLOADS = {
    "mlp": (dict(kind="acoustic", rows=3000, n_classes=8, shard_rows=750), dict(hidden=(32,), activation="tanh"),
            dict(learning_rate=0.05, batch_size=50)),
    "sparse_autoencoder": (dict(kind="patches", rows=3000, image_source="digits", shard_rows=750),
                           dict(n_hidden=16), dict(learning_rate=0.05, batch_size=50)),
    "embedding_lm": (dict(kind="text", rows=6000, vocab_size=300, context=2, shard_rows=1500),
                     dict(embed_dim=16, hidden=32), dict(learning_rate=0.1, batch_size=50)),
}


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    root = tmp_path_factory.mktemp("workloads")
    return {name: make_dataset(path=root / name, **spec) for name, (spec, _, _) in WORKLOADS.items()}


@pytest.mark.parametrize("name", WORKLOADS)
def test_sandblaster_and_downpour_reduce_the_held_out_objective(client, workloads, name) -> None:
    data = workloads[name]
    _, options, downpour_options = WORKLOADS[name]
    model = model_for_dataset(name, data["train"], l2=1e-4, **options)
    x0 = model.init_params(0)
    start = evaluate_model(model, x0, data["test"])["objective"]

    lbfgs = sandblaster_lbfgs(model, data["train"], client=client, x0=x0, maxiter=25, portion_rows=250)
    assert lbfgs.nit >= 5
    # Sandblaster's objective is the in-process one at its final point (float32 acoustic data: to 1e-6).
    X, y = data["train"].load_rows(0, data["train"].n_samples)
    assert lbfgs.fun == pytest.approx(model.objective(lbfgs.x, X, y)[0], rel=1e-6)
    assert lbfgs.fun < 0.8 * model.objective(x0, X, y)[0]

    sgd = downpour_sgd(model, data["train"], client=client, x0=x0, n_replicas=2, n_param_shards=2, epochs=2,
                       **downpour_options)
    assert sgd.success, sgd.message
    for x in (lbfgs.x, sgd.x):
        assert evaluate_model(model, x, data["test"])["objective"] < 0.9 * start
    if name == "embedding_lm":
        assert sgd.stats["sparse"]
        assert sgd.stats["bytes_in"] < 0.9 * sgd.stats["dense_bytes_in"]
