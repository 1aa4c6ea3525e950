"""The Tweedie family with the log link (Poisson, Gamma, Tweedie): scikit-learn's objective and
optimum; Gamma's inverse link and the negative binomial: statsmodels' optimum; finite-difference
gradients, sparse rows as dense, labels outside the support."""

from __future__ import annotations

import decimal
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import statsmodels.api as sm
from scipy.optimize import check_grad
from scipy.optimize import minimize as scipy_minimize
from scipy.special import gammaln
from sklearn.linear_model import GammaRegressor, PoissonRegressor, TweedieRegressor
from sklearn.metrics import d2_tweedie_score, mean_tweedie_deviance

from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import Gamma, NegativeBinomial, Poisson, Tweedie, model_for_dataset
from dasklbfgs.models._kernels import gamma_inverse_link, negative_binomial_link
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
NB_COUNTS = RNG.negative_binomial(1 / 0.7, 1 / (1 + 0.7 * MU)).astype(float)  # dispersion 0.7: variance mu + 0.7 mu^2
#: the models without a scikit-learn counterpart, and their labels
OTHERS = {
    "negative_binomial": (NegativeBinomial(4, dispersion=0.7, l2=0.1), NB_COUNTS),
    "gamma-inverse": (Gamma(4, link="inverse", l2=0.1), CASES["gamma"][2]),
}
ALL_ROWS = {**{name: (model, y) for name, (model, _, y) in CASES.items()}, **OTHERS}
TIGHT = {"gtol": 1e-10, "ftol": 1e-15, "maxiter": 1000}


@pytest.mark.parametrize("name", list(CASES))
def test_the_optimum_is_scikit_learns(name) -> None:
    model, reference, y = CASES[name]
    found = scipy_minimize(lambda x: model.objective(x, X, y, W), np.zeros(5), jac=True, method="L-BFGS-B",
                           options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 2000}).x
    reference.set_params(tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=W)
    np.testing.assert_allclose(found[:4], reference.coef_, atol=1e-7)
    assert found[4] == pytest.approx(reference.intercept_, abs=1e-7)
    np.testing.assert_allclose(model.predict(found, X), reference.predict(X), rtol=1e-6)


@pytest.mark.parametrize("name", list(ALL_ROWS))
def test_gradients_are_the_objectives_and_sparse_rows_give_the_same_sums(name) -> None:
    model, y = ALL_ROWS[name]
    x = model.init_params() + RNG.normal(scale=0.1, size=5)  # the inverse link's start is intercept 1
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
    labels = np.where(np.isin(np.arange(400), [205, 330]), -2.0, 1.0)
    negative = ShardedDataset.create(tmp_path / "n", X, labels, shard_rows=200)
    with pytest.raises(ModelDataMismatchError, match=r"needs labels >= 0 .* the smallest value -2; the first is "
                                                     r"y = -2 in shard 1 at row 205"):
        Poisson(4).check_data(negative)
    first_zero = int(np.flatnonzero(CASES["poisson"][2] == 0)[0])
    with pytest.raises(ModelDataMismatchError, match=rf"needs labels > 0 \(its variance power is 2\).* value 0; "
                                                     rf"the first is y = 0 in shard {first_zero // 200} at row "
                                                     rf"{first_zero}"):
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


def _statsmodels(y: np.ndarray, X: np.ndarray, family: Callable[[Any], Any], **weights: np.ndarray) -> Any:
    """statsmodels' ``GLM`` fit of ``family(sm)`` with an intercept last."""
    with warnings.catch_warnings():  # the inverse link "does not respect the domain" of the gamma family
        warnings.simplefilter("ignore", sm.tools.sm_exceptions.DomainWarning)
        model = sm.GLM(y, sm.add_constant(X, prepend=False), family=family(sm), **weights)
    return model.fit(tol=1e-13, maxiter=200)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_the_negative_binomial_optimum_is_statsmodels(client, tmp_path, weighted) -> None:
    """A sample weight multiplies the row's log-likelihood: statsmodels' ``freq_weights``; the
    objective is the negative log-likelihood less the log-gamma terms; the deviance metrics
    are Poisson's."""
    w = W if weighted else None
    data = ShardedDataset.create(tmp_path / "nb", X, NB_COUNTS, sample_weight=w, shard_rows=150)
    model = NegativeBinomial(4, dispersion=0.7)
    result = minimize(model, data, client=client, score=True, **TIGHT)
    reference = _statsmodels(NB_COUNTS, X, lambda sm: sm.families.NegativeBinomial(alpha=0.7),
                             **({} if w is None else {"freq_weights": w}))
    np.testing.assert_allclose(result.x, reference.params, atol=1e-7)
    weight = np.ones(400) if w is None else w
    log_gamma = gammaln(NB_COUNTS + 1 / 0.7) - gammaln(NB_COUNTS + 1) - gammaln(1 / 0.7)
    loss, _ = model.loss_grad_sum(reference.params, X, NB_COUNTS, w)
    assert loss == pytest.approx(-reference.llf + weight @ log_gamma, rel=1e-12)
    predicted, scores = model.predict(result.x, X), result.scores["train"]
    assert scores["mean_tweedie_deviance"] == pytest.approx(
        mean_tweedie_deviance(NB_COUNTS, predicted, sample_weight=w, power=1), rel=1e-9)
    assert scores["d2"] == pytest.approx(d2_tweedie_score(NB_COUNTS, predicted, sample_weight=w, power=1), rel=1e-9)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_an_estimated_dispersion_is_statsmodels_maximum_likelihood(client, tmp_path, weighted) -> None:
    """``dispersion=None``: the coefficients and ``a`` by maximum likelihood, as statsmodels'
    discrete ``NegativeBinomial`` (nb2) finds them, from the stored shards and sparse ones;
    the loss is the full negative log-likelihood less ``log Γ(y + 1)``; its gradient in ``a``
    is the finite difference's."""
    w = np.arange(400) % 3 + 1.0 if weighted else None  # whole weights: the reference repeats the rows
    model = NegativeBinomial(4, dispersion=None)
    assert model.n_params == 6 and model.init_params()[-1] == 1.0 and not model.starts_at_zero
    dense = ShardedDataset.create(tmp_path / "nb", X, NB_COUNTS, sample_weight=w, shard_rows=150)
    sparse = ShardedDataset.create(tmp_path / "nbs", sp.csr_array(X), NB_COUNTS, sample_weight=w, shard_rows=150)
    repeats = np.ones(400, dtype=int) if w is None else w.astype(int)  # statsmodels' discrete model takes no weights
    fit = sm.NegativeBinomial(np.repeat(NB_COUNTS, repeats), sm.add_constant(np.repeat(X, repeats, axis=0),
                                                                            prepend=False), loglike_method="nb2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = fit.fit(method="newton", maxiter=200, tol=1e-14, disp=False)
    for data in (dense, sparse):
        result = minimize(model, data, client=client, **TIGHT)
        assert result.success, result.message
        np.testing.assert_allclose(result.x, reference.params, atol=1e-6)
    assert model.dispersion_of(result.x) == pytest.approx(0.7, abs=0.3)  # the planted over-dispersion
    loss, _ = model.loss_grad_sum(np.asarray(reference.params), X, NB_COUNTS, w)
    assert loss == pytest.approx(-reference.llf - repeats @ gammaln(NB_COUNTS + 1), rel=1e-12)
    at = np.asarray(reference.params) + 0.05
    grad = model.loss_grad_sum(at, X, NB_COUNTS, w)[1]
    step = np.zeros(6)
    step[-1] = 1e-6
    numeric = (model.loss_grad_sum(at + step, X, NB_COUNTS, w)[0] - model.loss_grad_sum(at - step, X, NB_COUNTS, w)[0])
    assert grad[-1] == pytest.approx(numeric / 2e-6, rel=1e-6)
    with pytest.raises(ConfigurationError, match="estimates its dispersion with the coefficients; inference takes"):
        from dasklbfgs import inference

        inference(model, result.x, dense)


def _inverse_link_amounts(case: str) -> tuple[np.ndarray, np.ndarray]:
    """Features and gamma labels of mean ``1 / z``: ``z`` about 1/100 on features in [0, 1],
    or about 1/1000 on the normal features ``X``."""
    rng = np.random.default_rng(8)
    if case == "from-1":
        features = rng.uniform(0.0, 1.0, size=(400, 3))
        return features, 100.0 * rng.gamma(3.0, 1.0 / (3.0 * (features @ np.array([0.5, 0.3, 0.2]) + 0.4)))
    return X, rng.gamma(2.0, 1.0 / (2e-3 * (1.0 + X @ np.array([0.1, -0.05, 0.08, 0.0]))))


@pytest.mark.parametrize("case", ["from-1", "from-the-label-range"])
def test_the_gamma_inverse_link_optimum_is_statsmodels(client, tmp_path, case) -> None:
    """From a mean of 1 a hundred times below the labels, steps that leave ``z > 0`` meet an
    infinite objective and are shortened; built for a dataset, the start is the geometric
    middle of the labels' range (the labels in the thousands)."""
    features, y = _inverse_link_amounts(case)
    data = ShardedDataset.create(tmp_path / "amounts", features, y, sample_weight=W, shard_rows=150)
    model = Gamma(3, link="inverse") if case == "from-1" else model_for_dataset("gamma", data, link="inverse")
    assert model.start_mean == (None if case == "from-1" else pytest.approx(np.sqrt(y.min() * y.max())))
    result = minimize(model, data, client=client, score=True, **TIGHT)
    assert result.success, result.message
    reference = _statsmodels(y, features, lambda sm: sm.families.Gamma(link=sm.families.links.InversePower()),
                             var_weights=W)
    np.testing.assert_allclose(result.x, reference.params, rtol=1e-6, atol=1e-6 * np.abs(reference.params).max())
    predicted = model.predict(result.x, features)
    np.testing.assert_allclose(predicted, 1.0 / (features @ reference.params[:-1] + reference.params[-1]), rtol=1e-6)
    assert result.scores["train"]["mean_tweedie_deviance"] == pytest.approx(
        mean_tweedie_deviance(y, predicted, sample_weight=W, power=2), rel=1e-9)


def _nb_row(z: float, y: float, a: float) -> tuple[float, float]:
    """One row's negative binomial loss and derivative in their direct forms, at 60 digits."""
    with decimal.localcontext(decimal.Context(prec=60)):
        z_, y_, a_ = decimal.Decimal(z), decimal.Decimal(y), decimal.Decimal(a)
        mu = z_.exp()
        loss = (y_ + 1 / a_) * (1 + a_ * mu).ln() - y_ * z_ - y_ * a_.ln()
        return float(loss), float((mu - y_) / (1 + a_ * mu))


def test_the_kernels_are_stable_far_out_and_the_inverse_link_is_infinite_outside_its_domain() -> None:
    z = np.array([-1e6, -800.0, -30.0, 0.0, 2.0, 30.0, 30.0, 800.0, 1e6])
    y = np.array([0.0, 3.0, 1.0, 2.0, 0.0, 1.0, 1e13, 5.0, 7.0])
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # underflow to 0 is the right answer
        rows = [negative_binomial_link(z[[i]], y[[i]], dispersion=0.5) for i in range(z.size)]
        inside = gamma_inverse_link(np.array([0.5, 2.0]), np.array([1.0, 3.0]), np.array([2.0, 1.0]))
        outside = gamma_inverse_link(np.array([0.5, 0.0, 2.0]), np.ones(3))
    for (loss, dz), zi, yi in zip(rows, z, y):
        expected_loss, expected_dz = _nb_row(zi, yi, 0.5)
        assert loss == pytest.approx(expected_loss, rel=1e-14, abs=1e-300), (zi, yi)
        assert dz[0] == pytest.approx(expected_dz, rel=1e-12, abs=1e-300), (zi, yi)  # (mu - y) cancels at mu ~ y
    assert inside[0] == pytest.approx(2.0 * (0.5 - np.log(0.5)) + (6.0 - np.log(2.0)), rel=1e-15)
    np.testing.assert_allclose(inside[1], [2.0 * (1.0 - 2.0), 3.0 - 0.5])
    assert outside[0] == np.inf and np.all(outside[1] == 0)


def test_negative_binomial_and_gamma_link_options_are_checked_and_round_trip(tmp_path) -> None:
    counts = ShardedDataset.create(tmp_path / "c", X, NB_COUNTS, shard_rows=200)
    negative = ShardedDataset.create(tmp_path / "n", X, np.where(np.arange(400) == 5, -2.0, 1.0), shard_rows=200)
    with pytest.raises(ModelDataMismatchError, match=r"NegativeBinomial.* needs labels >= 0 .* the smallest value -2"):
        NegativeBinomial(4).check_data(negative)
    NegativeBinomial(4).check_data(counts)
    for dispersion in (0.0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ConfigurationError, match=rf"dispersion must be a finite number > 0 .*got {dispersion!r}"):
            NegativeBinomial(4, dispersion=dispersion)
    with pytest.raises(ConfigurationError, match=r"link must be one of \('log', 'inverse'\), got 'identity'"):
        Gamma(4, link="identity")
    with pytest.raises(ConfigurationError, match=r"link='inverse' needs fit_intercept=True"):
        Gamma(4, link="inverse", fit_intercept=False)
    made = model_for_dataset("negative_binomial", counts, l2=0.1, dispersion=0.5)
    assert isinstance(made, NegativeBinomial) and made.dispersion == 0.5 and made.l2 == 0.1
    assert model_for_dataset("negative_binomial", counts).dispersion == 1.0
    inverse = model_for_dataset("gamma", counts, link="inverse")  # zero counts: no start from their range
    assert isinstance(inverse, Gamma) and inverse.link_name == "inverse" and inverse.start_mean is None
    assert model_for_dataset("gamma", counts).link_name == "log"
    np.testing.assert_array_equal(inverse.init_params(), [0.0, 0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(Gamma(4, link="inverse", start_mean=4.0).init_params(), [0.0, 0.0, 0.0, 0.0, 0.25])
    for start, link in ((0.0, "inverse"), (float("nan"), "inverse"), (2.0, "log")):
        with pytest.raises(ConfigurationError, match=r"start_mean is the inverse link's starting mean"):
            Gamma(4, link=link, start_mean=start)
    with pytest.raises(ConfigurationError, match=r"does not take option\(s\) \['dispersion'\]"):
        model_for_dataset("poisson", counts, dispersion=0.5)
    for model in (made, inverse, Gamma(4, link="inverse", start_mean=3.5), Gamma(4, l1=0.1)):
        again = model_from_config(model_config(model))
        assert type(again) is type(model) and model_config(again) == model_config(model)
    assert model_from_config({"name": "gamma", "n_features": 4}).link_name == "log"  # saved before links
