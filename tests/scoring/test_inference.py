"""A GLM's inference equals statsmodels' GLM results at the same parameters (to 1e-6): standard
errors, z, p-values, intervals, deviances, Pearson chi2, scale, log-likelihood, AIC and BIC;
with offsets (the null deviance of the intercept-only model fitted with them) and the negative
binomial's frequency weights; by the workers, here, and on cached shards; and what it refuses."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
import statsmodels.api as sm
from scipy import stats

import dasklbfgs
from dasklbfgs import ShardedDataset, inference
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import MLP, Gamma, LeastSquares, Logistic, NegativeBinomial, Poisson, Softmax, Tweedie
from dasklbfgs.scoring.inference import Inference, family_of, inferred

rng = np.random.default_rng(11)
N, D = 600, 3
X = rng.normal(size=(N, D))
W = rng.uniform(0.5, 2.0, N)
ETA = X @ np.array([0.3, -0.2, 0.1]) + 0.5
MU = np.exp(ETA)
LABELS = {
    "gaussian": ETA + rng.normal(size=N),
    "binomial": (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-ETA))).astype(np.float64),
    "counts": rng.poisson(MU).astype(np.float64),
    "amounts": rng.gamma(2.0, MU / 2.0),
    "premiums": rng.poisson(MU) * rng.gamma(2.0, 0.5, N),
}
#: log exposures, and labels whose means include them (a generator of their own: the one above
#: is drawn from by tests too)
_more = np.random.default_rng(12)
OFFSET = _more.normal(0.0, 0.5, N)
ETA_O = ETA + OFFSET
WITH_OFFSETS = {
    "gaussian": ETA_O + _more.normal(size=N),
    "binomial": (_more.uniform(size=N) < 1.0 / (1.0 + np.exp(-ETA_O))).astype(np.float64),
    "counts": _more.poisson(np.exp(ETA_O)).astype(np.float64),
    "amounts": _more.gamma(2.0, np.exp(ETA_O) / 2.0),
    "premiums": _more.poisson(np.exp(ETA_O)) * _more.gamma(2.0, 0.5, N),
    "over-dispersed": _more.negative_binomial(2.0, 2.0 / (2.0 + np.exp(ETA_O))).astype(np.float64),
}
LABELS["over-dispersed"] = _more.negative_binomial(2.0, 2.0 / (2.0 + MU)).astype(np.float64)
LOG = sm.families.links.Log()
NB = sm.families.NegativeBinomial(alpha=0.5)
CASES = {  # name: (model, statsmodels family, labels, weighted)
    "least-squares": (LeastSquares(D), sm.families.Gaussian(), "gaussian", False),
    "least-squares-weighted": (LeastSquares(D), sm.families.Gaussian(), "gaussian", True),
    "logistic": (Logistic(D), sm.families.Binomial(), "binomial", False),
    "logistic-weighted": (Logistic(D), sm.families.Binomial(), "binomial", True),
    "poisson": (Poisson(D), sm.families.Poisson(), "counts", False),
    "poisson-weighted": (Poisson(D), sm.families.Poisson(), "counts", True),
    "gamma": (Gamma(D), sm.families.Gamma(LOG), "amounts", False),
    "gamma-weighted": (Gamma(D), sm.families.Gamma(LOG), "amounts", True),
    "tweedie": (Tweedie(D, power=1.5), sm.families.Tweedie(var_power=1.5, link=LOG), "premiums", False),
    "tweedie-weighted": (Tweedie(D, power=1.5), sm.families.Tweedie(var_power=1.5, link=LOG), "premiums", True),
    "tweedie-1": (Tweedie(D, power=1.0), sm.families.Tweedie(var_power=1.0, link=LOG), "counts", True),
    "tweedie-2": (Tweedie(D, power=2.0), sm.families.Tweedie(var_power=2.0, link=LOG), "amounts", True),
    # statsmodels has no Tweedie likelihood above power 2: log-likelihood, AIC and BIC are NaN in both
    "tweedie-3": (Tweedie(D, power=3.0), sm.families.Tweedie(var_power=3.0, link=LOG), "amounts", True),
    "poisson-no-intercept": (Poisson(D, fit_intercept=False), sm.families.Poisson(), "counts", True),
    # the negative binomial's sample weights are statsmodels' freq_weights: df_resid and BIC count their sum
    "negative-binomial": (NegativeBinomial(D, dispersion=0.5), NB, "over-dispersed", False),
    "negative-binomial-weighted": (NegativeBinomial(D, dispersion=0.5), NB, "over-dispersed", True),
}
#: with offsets (labels of WITH_OFFSETS): the null model is fitted with them, in closed form (Gaussian,
#: log-link Tweedie family) or by Newton's method on the intercept (logistic, negative binomial)
OFFSET_CASES = {name: CASES[name] for name in (
    "least-squares", "least-squares-weighted", "logistic-weighted", "poisson", "poisson-weighted", "gamma",
    "gamma-weighted", "tweedie-weighted", "negative-binomial", "negative-binomial-weighted")}
#: our name: statsmodels' GLMResults attribute
FIGURES = {"std_err": "bse", "z": "tvalues", "p_values": "pvalues", "deviance": "deviance",
           "null_deviance": "null_deviance", "pearson_chi2": "pearson_chi2", "scale": "scale", "loglike": "llf",
           "aic": "aic", "bic": "bic"}


def _statsmodels(model, family, X, y, w, offset=None):
    """statsmodels' fit, converged far below the tolerance compared (its covariance is that
    of the last IRLS step's weights, an iteration behind its parameters); the weights are its
    var_weights, a negative binomial's its freq_weights."""
    exog = sm.add_constant(X, prepend=False, has_constant="add") if model.fit_intercept else X
    weights = {"freq_weights" if isinstance(model, NegativeBinomial) else "var_weights": w}
    return sm.GLM(y, exog, family=family, offset=offset, **weights).fit(tol=1e-14, maxiter=1000)


def p_value_rtol(z, rtol: float) -> np.ndarray:
    """The relative tolerance of a two-sided normal p-value, p = 2 Phi(-|z|), whose z is
    known to ``rtol``: d ln p / d|z| = -2 phi(z) / p, which the Mills ratio bounds by |z| + 1,
    so p's relative error is at most (|z| + 1) |z| times z's. At |z| near 20 (p near 1e-90) a
    z good to 1e-6 gives a p-value good to only about 4e-4, whichever of two summation orders
    or two BLAS kernels made it."""
    z = np.abs(np.asarray(z, dtype=np.float64))
    return rtol * np.maximum(1.0, (z + 1.0) * z)


def assert_figures(found, reference, rtol: float = 1e-6, keep=slice(None)) -> None:
    """Every figure of FIGURES at ``rtol``, the p-values at the tolerance their z's gives."""
    for ours, theirs in FIGURES.items():
        mine, its = np.asarray(getattr(found, ours)), np.asarray(getattr(reference, theirs))
        mine, its = (mine[keep], its[keep]) if mine.ndim else (mine, its)
        if ours == "p_values":
            z = np.asarray(reference.tvalues)[keep]
            assert np.all(np.abs(mine - its) <= p_value_rtol(z, rtol) * np.abs(its)), (ours, mine, its)
        else:
            np.testing.assert_allclose(mine, its, rtol=rtol, err_msg=ours)


def _assert_statsmodels(found: Inference, reference, alpha: float = 0.05) -> None:
    assert_figures(found, reference)
    # A bound coef -/+ q std_err is known to 1e-6 of its terms' size, |coef| + q std_err, not of
    # itself: one near zero (0.019 of 0.5 in the class-weighted logistic's) has no relative
    # precision left. statsmodels' std_err is good to ~1e-8 there (its covariance comes from the
    # last IRLS step's weights, which on OpenBLAS's Sandybridge kernels is a step before the end).
    expected = reference.conf_int(alpha=alpha)
    q = stats.norm.ppf(1.0 - alpha / 2.0)
    size = np.abs(np.asarray(reference.params)) + q * np.asarray(reference.bse)
    np.testing.assert_array_less(np.abs(found.conf_int - expected), np.outer(1e-6 * size + 1e-12, [1.0, 1.0]),
                                 err_msg="conf_int")
    assert (found.df_model, found.n_samples) == (reference.df_model, reference.nobs)
    assert found.df_resid == pytest.approx(reference.df_resid, rel=1e-12)  # a weight sum for a weighted NB


def _assert_same(a: Inference, b: Inference) -> None:
    for name in ("coef", "std_err", "z", "p_values", "conf_int"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("deviance", "null_deviance", "pearson_chi2", "scale", "loglike", "aic", "bic", "df_model",
                 "df_resid", "n_samples", "names", "penalized"):
        assert getattr(a, name) == getattr(b, name) or (np.isnan(getattr(a, name)) and np.isnan(getattr(b, name)))


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log")  # statsmodels' Tweedie deviance at y = 0
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")
@pytest.mark.parametrize("name", list(CASES))
def test_the_figures_are_statsmodels_glm_s_by_the_workers_and_here(name, client, tmp_path) -> None:
    model, family, labels, weighted = CASES[name]
    y, w = LABELS[labels], (W if weighted else None)
    reference = _statsmodels(model, family, X, y, w)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=w, shard_rows=128)
    found = inference(model, reference.params, data, client=client)
    _assert_statsmodels(found, reference)
    assert found.names == (*(f"x{i}" for i in range(D)), *(("intercept",) if model.fit_intercept else ()))
    assert not found.penalized and found.family == type(family).__name__
    _assert_same(inferred(model, reference.params, data, family_of(model), 0.05, client=None), found)


@pytest.mark.filterwarnings("ignore:The InversePower link function does not respect the domain")
def test_a_gamma_with_the_inverse_link_is_statsmodels_inverse_power_gamma(client, tmp_path) -> None:
    positive = rng.uniform(size=(N, D))
    y = rng.gamma(2.0, 0.5 / (positive @ np.array([0.3, 0.2, 0.1]) + 0.5))
    model = Gamma(D, link="inverse")
    reference = _statsmodels(model, sm.families.Gamma(sm.families.links.InversePower()), positive, y, W)
    data = ShardedDataset.create(tmp_path / "d", positive, y, sample_weight=W, shard_rows=128)
    found = inference(model, reference.params, data, client=client)
    _assert_statsmodels(found, reference)
    assert found.link == "InversePower" and "Link Function:          InversePower" in found.summary()


def test_a_logistic_model_s_class_weights_weigh_its_rows_as_in_its_fit(client, tmp_path) -> None:
    y = LABELS["binomial"]
    model = Logistic(D, class_weight=[0.5, 2.0])
    reference = _statsmodels(model, sm.families.Binomial(), X, y, W * np.where(y == 1, 2.0, 0.5))
    data = ShardedDataset.create(tmp_path / "d", X, y.astype(np.int64), sample_weight=W, shard_rows=128)
    _assert_statsmodels(inference(model, reference.params, data, client=client), reference)


def test_intervals_at_another_level_and_the_path_of_a_dataset(client, tmp_path) -> None:
    y = LABELS["counts"]
    reference = _statsmodels(Poisson(D), sm.families.Poisson(), X, y, W)
    ShardedDataset.create(tmp_path / "d", X, y, sample_weight=W, shard_rows=100)
    found = inference(Poisson(D), reference.params, tmp_path / "d", client=client, alpha=0.1)
    _assert_statsmodels(found, reference, alpha=0.1)
    assert re.search(r" \[0\.05 +0\.95\]\n", found.summary())
    for alpha in (0.0, 1.0, "0.05", True):
        with pytest.raises(ConfigurationError, match=r"alpha must be a number in \(0, 1\)"):
            inference(Poisson(D), reference.params, tmp_path / "d", client=client, alpha=alpha)


@pytest.mark.filterwarnings("ignore:The design matrix is rank-deficient")
def test_sparse_rows_give_the_dense_figures_and_a_feature_never_seen_has_no_standard_error(client, tmp_path) -> None:
    dense = np.where(rng.uniform(size=(N, D + 1)) < 0.4, rng.normal(size=(N, D + 1)), 0.0)
    dense[:, 2] = 0.0  # a feature no row has a value for
    y = rng.poisson(np.exp(dense @ np.array([0.4, -0.3, 0.0, 0.2]) + 0.3)).astype(np.float64)
    data = ShardedDataset.create(tmp_path / "d", sp.csr_array(dense), y, sample_weight=W, shard_rows=128)
    assert data.is_sparse
    reference = _statsmodels(Poisson(D + 1), sm.families.Poisson(), dense, y, W)
    found = inference(Poisson(D + 1), reference.params, data, client=client)
    seen = [0, 1, 3, 4]
    assert reference.bse[2] < 1e-12 and np.isnan(found.std_err[2]) and np.isnan(found.p_values[2])
    assert_figures(found, reference, keep=seen)
    assert (found.df_model, found.df_resid) == (reference.df_model, reference.df_resid) == (3, N - 4)
    on_dense = ShardedDataset.create(tmp_path / "dense", dense, y, sample_weight=W, shard_rows=128)
    np.testing.assert_allclose(inference(Poisson(D + 1), reference.params, on_dense, client=client).std_err,
                               found.std_err, rtol=1e-10)


def test_cached_shards_give_the_figures_of_the_store(client, tmp_path) -> None:
    model, family, labels, _ = CASES["gamma-weighted"]
    y = LABELS[labels]
    reference = _statsmodels(model, family, X, y, W)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=W, shard_rows=128)
    with dasklbfgs.cached(data, client=client) as shards:
        found = inference(model, reference.params, shards)
    _assert_statsmodels(found, reference)
    _assert_same(found, inference(model, reference.params, data, client=client))


@pytest.mark.parametrize("name", list(OFFSET_CASES))
def test_offsets_are_statsmodels_offset_in_the_fit_and_in_its_null_model(name, client, tmp_path) -> None:
    model, family, labels, weighted = OFFSET_CASES[name]
    y, w = WITH_OFFSETS[labels], (W if weighted else None)
    reference = _statsmodels(model, family, X, y, w, OFFSET)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=w, offset=OFFSET, shard_rows=128)
    found = inference(model, reference.params, data, client=client)
    _assert_statsmodels(found, reference)
    _assert_same(inferred(model, reference.params, data, family_of(model), 0.05, client=None), found)
    without = ShardedDataset.create(tmp_path / "without", X, y, sample_weight=w, shard_rows=128)
    assert inference(model, reference.params, without, client=client).deviance != pytest.approx(found.deviance)


def test_cached_shards_with_offsets_give_the_figures_of_the_store(client, tmp_path) -> None:
    model, family, labels, _ = OFFSET_CASES["negative-binomial-weighted"]
    y = WITH_OFFSETS[labels]
    reference = _statsmodels(model, family, X, y, W, OFFSET)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=W, offset=OFFSET, shard_rows=128)
    with dasklbfgs.cached(data, client=client) as shards:
        found = inference(model, reference.params, shards)
    _assert_statsmodels(found, reference)
    _assert_same(found, inference(model, reference.params, data, client=client))


def test_a_negative_binomial_s_weights_are_frequencies(client, tmp_path) -> None:
    y, counts = LABELS["over-dispersed"], np.round(2.0 * W)  # whole frequencies, then fractional ones
    model = NegativeBinomial(D, dispersion=0.5)
    for kind, weights, df_resid in (("whole", counts, int(counts.sum()) - D - 1), ("fractional", W, W.sum() - D - 1)):
        reference = _statsmodels(model, NB, X, y, weights)
        data = ShardedDataset.create(tmp_path / kind, X, y, sample_weight=weights, shard_rows=128)
        found = inference(model, reference.params, data, client=client)
        _assert_statsmodels(found, reference)
        assert found.n_samples == N and found.df_resid == pytest.approx(df_resid, rel=1e-12)
        assert isinstance(found.df_resid, int) == isinstance(df_resid, int)  # an int for whole weights
        assert found.bic == pytest.approx(-2.0 * found.loglike + (D + 1) * np.log(weights.sum()), rel=1e-12)
        shown = str(df_resid) if isinstance(df_resid, int) else f"{df_resid:.2f}"
        assert re.search(rf"Df Residuals: +{re.escape(shown)}\n", found.summary())


@pytest.mark.filterwarnings("ignore:The design matrix is rank-deficient")
def test_collinear_features_count_once_in_the_degrees_of_freedom(client, tmp_path) -> None:
    twice = np.column_stack([X, X[:, 0]])
    y = LABELS["gaussian"]
    data = ShardedDataset.create(tmp_path / "d", twice, y, shard_rows=128)
    reference = _statsmodels(LeastSquares(D + 1), sm.families.Gaussian(), twice, y, None)
    found = inference(LeastSquares(D + 1), reference.params, data, client=client)
    assert (found.df_model, found.df_resid) == (reference.df_model, reference.df_resid) == (D, N - D - 1)
    np.testing.assert_allclose(found.std_err[1:D], reference.bse[1:D], rtol=1e-6)  # the others' are identified
    assert found.deviance == pytest.approx(reference.deviance, rel=1e-9)


def test_a_penalised_fit_is_flagged_and_its_summary_says_what_its_errors_are(client, tmp_path) -> None:
    y = LABELS["counts"]
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=128, feature_names=["age", "income", "tenure"])
    model = Poisson(D, l2=0.05)
    fitted = dasklbfgs.minimize(model, data, client=client, gtol=1e-8)
    found = inference(model, fitted.x, data, client=client)
    assert found.penalized and found.names == ("age", "income", "tenure", "intercept")
    text = str(found)
    assert text == found.summary()
    assert "do not account for the penalty's shrinkage" in text and "unpenalised likelihood" in text
    assert not inference(Poisson(D), fitted.x, data, client=client).penalized
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[-6:-2]}
    assert set(rows) == {"age", "income", "tenure", "intercept"}
    for i, name in enumerate(found.names):
        assert rows[name][:2] == [f"{found.coef[i]:.4f}", f"{found.std_err[i]:.3f}"]
    for header in ("Model Family:                Poisson", "Link Function:                   Log",
                   "No. Observations:                   600", "coef    std err          z      P>|z|"):
        assert header in text


def test_models_that_are_no_glm_too_wide_ones_and_an_inverse_link_with_offsets_are_refused(tmp_path) -> None:
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=300)
    with pytest.raises(ConfigurationError, match=r"MLP\(.*\) is not one: it takes LeastSquares, Logistic, Poisson"):
        inference(MLP(D, (4,), 2), np.zeros(MLP(D, (4,), 2).n_params), data)
    with pytest.raises(ConfigurationError, match=r"does not cover multiclass models: Softmax\(.*\) is a softmax"):
        inference(Softmax(D, 2), np.zeros(Softmax(D, 2).n_params), data)
    offsets = ShardedDataset.create(tmp_path / "o", X, LABELS["amounts"], offset=np.zeros(N), shard_rows=300)
    with pytest.raises(ConfigurationError, match=r"does not take offsets with the inverse link of Gamma\(.*use the "
                                                 r"log link, or a dataset without offsets"):
        inference(Gamma(D, link="inverse"), np.r_[np.zeros(D), 1.0], offsets)
    wide = 16_384  # with its intercept, 16385^2 float64 is just over 2 GiB
    rows = sp.random_array((20, wide), density=0.001, format="csr", rng=np.random.default_rng(0))
    hashed = ShardedDataset.create(tmp_path / "wide", rows, rng.normal(size=20), shard_rows=10)
    with pytest.raises(ConfigurationError, match=r"16385 x 16385 information matrix .* \(d = 16384 features and the "
                                                 r"intercept\), 2147745800 bytes \(2\.0 GiB\), more than the 2\.0 GiB"):
        inference(LeastSquares(wide), np.zeros(wide + 1), hashed)
