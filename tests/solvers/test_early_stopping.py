"""Early stopping on the held-out objective, for every solver: the run stops once the held-out
objective has not improved for n_iter_no_change scorings, and returns the best parameters."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import Logistic
from dasklbfgs.optim import Status


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    """Few training rows and many features, no penalty: the held-out objective turns up."""
    rng = np.random.default_rng(4)
    d = 40
    w = np.zeros(d)
    w[:3] = [1.0, -1.0, 0.5]
    X = rng.normal(size=(1060, d))
    y = (X @ w + rng.logistic(size=1060) > 0).astype(np.int64)
    root = tmp_path_factory.mktemp("early")
    return (ShardedDataset.create(root / "train", X[:60], y[:60], shard_rows=30),
            ShardedDataset.create(root / "test", X[60:], y[60:], shard_rows=500))


@pytest.mark.parametrize("solver, options", [
    ("sandblaster", {"maxiter": 300, "eval_every": 1}),
    ("downpour", {"epochs": 400, "batch_size": 30, "n_replicas": 1, "learning_rate": 0.5, "eval_every": 2}),
], ids=["sandblaster", "downpour"])
def test_a_run_stops_on_its_held_out_objective_with_its_best_parameters(client, overfit, solver, options) -> None:
    train, test = overfit
    model = Logistic(40)
    seen: dict[int, np.ndarray] = {}

    def keep(intermediate):
        if "eval_objective" in intermediate:
            seen[intermediate["step"]] = intermediate.x.copy()

    result = minimize(model, train, solver, client=client, eval_data=test, callback=keep, early_stopping=True,
                      n_iter_no_change=3, **options)
    assert result.status == Status.EARLY_STOPPED and result.success
    assert result.message.startswith("early stopping: the held-out objective did not improve")
    scored = [(h["step"], h["eval_objective"]) for h in result.history if "eval_objective" in h]
    info = result.early_stopping
    best_step, best = info["best_step"], info["best_eval_objective"]
    assert info["stopped"] and min(v for step, v in scored if step <= best_step) == best
    # the patience's scorings after the best, none better (a replica run may score once more as it ends)
    after = [v for step, v in scored if step > best_step][:3]
    assert len(after) == 3 and min(after) >= best
    np.testing.assert_array_equal(result.x, seen[best_step])  # the parameters of the best scoring
    X, y = test.load_rows(0, test.n_samples)
    assert model.objective(result.x, X, y)[0] == pytest.approx(best, rel=1e-9)


def test_early_stopping_needs_held_out_data(client, overfit) -> None:
    train, _ = overfit
    with pytest.raises(ConfigurationError, match=r"early_stopping stops on the held-out objective: give eval_data"):
        minimize(Logistic(40), train, client=client, early_stopping=True)
    with pytest.raises(ConfigurationError, match="early_stopping needs eval_every"):
        minimize(Logistic(40), train, "downpour", client=client, eval_data=overfit[1], early_stopping=True)
    with pytest.raises(ConfigurationError, match="n_iter_no_change must be an integer >= 1, got 0"):
        minimize(Logistic(40), train, client=client, eval_data=overfit[1], early_stopping=True, n_iter_no_change=0)
    with pytest.raises(ConfigurationError, match="early_stopping stops on scorings made during the run; defer_eval"):
        minimize(Logistic(40), train, "downpour", client=client, eval_data=overfit[1], early_stopping=True,
                 eval_every=2, defer_eval=True, batch_size=30, n_replicas=1)


def test_validation_fraction_holds_out_rows_of_the_training_data(client, tmp_path) -> None:
    """validation_fraction=0.25: the run fits the other rows alone (scipy's optimum of their
    objective) and scores the held-out ones (scikit-learn's log-loss on them); the same rows
    every run; with early stopping, a replica run stops on them."""
    from scipy.optimize import minimize as scipy_minimize
    from sklearn.metrics import log_loss

    from dasklbfgs.data.folds import RandomSplit

    rng = np.random.default_rng(11)
    X = rng.normal(size=(800, 5))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0, 0.3]) + rng.logistic(size=800) > 0).astype(np.int64)
    w = rng.uniform(0.5, 2.0, size=800)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=w, shard_rows=200)
    held = np.concatenate([RandomSplit(0.25).of_shard(i, np.empty(200)) == 1 for i in range(4)])
    assert 150 < held.sum() < 250
    model = Logistic(5, l2=1e-3)
    result = minimize(model, data, client=client, validation_fraction=0.25, gtol=1e-10, ftol=1e-15, score=True)
    kept = ~held

    def objective(x):
        loss, grad = model.objective(x, X[kept], y[kept], w[kept])
        return loss, grad

    reference = scipy_minimize(objective, np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                               options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 1000}).x
    np.testing.assert_allclose(result.x, reference, atol=1e-7)
    p = 1.0 / (1.0 + np.exp(-(X[held] @ result.x[:5] + result.x[5])))
    assert result.scores["test"]["log_loss"] == pytest.approx(log_loss(y[held], p, sample_weight=w[held]), rel=1e-9)
    assert result.scores["test"]["n_samples"] == 800  # the view's rows are the dataset's, the others weigh 0
    again = minimize(model, data, client=client, validation_fraction=0.25, gtol=1e-10, ftol=1e-15)
    np.testing.assert_array_equal(again.x, result.x)
    stopped = minimize(Logistic(5), data, "downpour", client=client, validation_fraction=0.25, early_stopping=True,
                       eval_every=5, n_iter_no_change=2, epochs=200, batch_size=50, n_replicas=1)
    assert stopped.status == Status.EARLY_STOPPED and stopped.early_stopping["stopped"]
    with pytest.raises(ConfigurationError, match=r"give eval_data or validation_fraction .*, not both"):
        minimize(model, data, client=client, validation_fraction=0.25, eval_data=data)
    with pytest.raises(ConfigurationError, match=r"validation_fraction must be a number in \(0, 1\) or None, got 1.5"):
        minimize(model, data, client=client, validation_fraction=1.5)
    with pytest.raises(ConfigurationError, match=r"validation_fraction=0.001 leaves no held-out rows of weight > 0"):
        minimize(model, ShardedDataset.create(tmp_path / "small", X[:50], y[:50], shard_rows=50), client=client,
                 validation_fraction=0.001)
