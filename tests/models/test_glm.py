"""The Tweedie family with the log link (Poisson, Gamma, Tweedie): scikit-learn's objective and
optimum, finite-difference gradients, sparse rows as dense, labels outside the support."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad
from scipy.optimize import minimize as scipy_minimize
from sklearn.linear_model import GammaRegressor, PoissonRegressor, TweedieRegressor

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import Gamma, Poisson, Tweedie, model_for_dataset
from dasklbfgs.models.glm import unit_deviance
from dasklbfgs.models.persist import model_config, model_from_config

RNG = np.random.default_rng(3)
X = RNG.normal(size=(400, 4))
MU = np.exp(X @ np.array([0.3, -0.2, 0.1, 0.0]) + 0.5)
W = RNG.uniform(0.5, 2.0, size=400)
CASES = {
    "poisson": (Poisson(4, l2=0.1), PoissonRegressor(alpha=0.1), RNG.poisson(MU).astype(float)),
    "gamma": (Gamma(4, l2=0.1), GammaRegressor(alpha=0.1), RNG.gamma(2.0, MU / 2.0)),
    "tweedie": (Tweedie(4, power=1.5, l2=0.1), TweedieRegressor(power=1.5, link="log", alpha=0.1),
                RNG.poisson(MU) * RNG.gamma(2.0, 0.5, 400)),
    "tweedie-3": (Tweedie(4, power=3.0, l2=0.1), TweedieRegressor(power=3.0, link="log", alpha=0.1),
                  RNG.gamma(4.0, MU / 4.0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_optimum_is_scikit_learns(name) -> None:
    model, reference, y = CASES[name]
    found = scipy_minimize(lambda x: model.objective(x, X, y, W), np.zeros(5), jac=True, method="L-BFGS-B",
                           options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 2000}).x
    reference.set_params(tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=W)
    np.testing.assert_allclose(found[:4], reference.coef_, atol=1e-7)
    assert found[4] == pytest.approx(reference.intercept_, abs=1e-7)
    np.testing.assert_allclose(model.predict(found, X), reference.predict(X), rtol=1e-6)


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_are_the_objectives_and_sparse_rows_give_the_same_sums(name) -> None:
    model, _, y = CASES[name]
    x = RNG.normal(scale=0.1, size=5)
    assert check_grad(lambda v: model.objective(v, X, y, W)[0], lambda v: model.objective(v, X, y, W)[1], x) < 1e-6
    dense = model.loss_grad_sum(x, X, y, W)
    sparse = model.loss_grad_sum(x, sp.csr_array(X), y, W)
    assert sparse[0] == pytest.approx(dense[0], rel=1e-12)
    np.testing.assert_allclose(sparse[1], dense[1], rtol=1e-12)


def test_the_deviance_is_scikit_learns() -> None:
    from sklearn.metrics import mean_tweedie_deviance

    y, mu = CASES["tweedie"][2], MU
    for power in (0.0, 1.0, 1.5, 2.0, 3.0):
        labels = y + (1.0 if power >= 2 else 0.0)
        assert np.mean(unit_deviance(labels, mu, power)) == pytest.approx(
            mean_tweedie_deviance(labels, mu, power=power), rel=1e-12)


def test_labels_outside_the_support_and_bad_powers_are_refused(tmp_path) -> None:
    counts = ShardedDataset.create(tmp_path / "c", X, CASES["poisson"][2], shard_rows=200)
    negative = ShardedDataset.create(tmp_path / "n", X, np.where(np.arange(400) == 5, -2.0, 1.0), shard_rows=200)
    with pytest.raises(ModelDataMismatchError, match=r"needs labels >= 0 .* the smallest value -2"):
        Poisson(4).check_data(negative)
    with pytest.raises(ModelDataMismatchError, match=r"needs labels > 0 \(its variance power is 2\).* value 0"):
        Gamma(4).check_data(counts)
    Tweedie(4, power=1.2).check_data(counts)  # zeros are a compound Poisson-gamma's
    Tweedie(4, power=0.0).check_data(negative)  # the normal takes any label
    for power in (0.5, -1.0, float("nan"), True):
        with pytest.raises(ConfigurationError, match=r"power must be 0 or a number >= 1"):
            Tweedie(4, power=power)
    made = model_for_dataset("tweedie", counts, l2=0.1, power=1.3)
    assert isinstance(made, Tweedie) and made.power == 1.3 and made.l2 == 0.1
    for model in (made, Poisson(4, l1=0.2), Gamma(4, fit_intercept=False)):
        again = model_from_config(model_config(model))
        assert type(again) is type(model) and model_config(again) == model_config(model)
