"""Every model with a Hessian (``has_hessian``): ``hessian_sum`` against central differences
of its gradient sums, dense and sparse rows alike, with weights, class weights and offsets;
and the models without one say so."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs.models import MLP
from dasklbfgs.models.glm import Gamma, NegativeBinomial, Poisson, Tweedie
from dasklbfgs.models.gram import weighted_gram
from dasklbfgs.models.linear import LeastSquares, Logistic, Softmax
from dasklbfgs.models.robust import Huber

N, D = 300, 4


def _labels(kind, rng):
    return {"real": rng.normal(size=N), "binary": rng.integers(0, 2, N).astype(float),
            "classes": rng.integers(0, 3, N).astype(float), "counts": rng.poisson(2.0, N).astype(float),
            "amounts": rng.gamma(2.0, 1.0, N)}[kind]


CASES = {
    "least_squares": (lambda: LeastSquares(D, l2=0.1), "real"),
    "logistic": (lambda: Logistic(D, class_weight=[1.0, 2.0]), "binary"),
    "softmax": (lambda: Softmax(D, 3, class_weight=[1.0, 2.0, 3.0]), "classes"),
    "softmax-no-intercept": (lambda: Softmax(D, 3, fit_intercept=False), "classes"),
    "poisson": (lambda: Poisson(D), "counts"),
    "gamma": (lambda: Gamma(D), "amounts"),
    "gamma-inverse": (lambda: Gamma(D, link="inverse"), "amounts"),
    "tweedie": (lambda: Tweedie(D, power=1.5), "amounts"),
    "negative-binomial": (lambda: NegativeBinomial(D, dispersion=0.7), "counts"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_hessian_sum_is_the_gradient_sums_derivative(name) -> None:
    make, kind = CASES[name]
    model = make()
    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(N, D)), _labels(kind, rng), rng.uniform(0.5, 2.0, N)
    offset = None if isinstance(model, Softmax) else rng.normal(scale=0.1, size=N)
    x = rng.normal(scale=0.1, size=model.n_params)
    if name == "gamma-inverse":  # inside its domain: every row's x . w + b > 0
        x[: model.n_coef] *= 0.01
        x[model.n_coef] = 2.0
    assert model.has_hessian
    H = model.hessian_sum(x, X, y, w, offset)
    step = 1e-6
    numeric = np.empty_like(H)
    for j in range(model.n_params):
        e = np.zeros(model.n_params)
        e[j] = step
        numeric[:, j] = (model.loss_grad_sum(x + e, X, y, w, offset)[1]
                         - model.loss_grad_sum(x - e, X, y, w, offset)[1]) / (2 * step)
    np.testing.assert_allclose(H, numeric, rtol=1e-6, atol=1e-6 * np.abs(H).max())
    np.testing.assert_array_equal(H, H.T)
    np.testing.assert_allclose(model.hessian_sum(x, sp.csr_matrix(X), y, w, offset), H, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(model.penalty_curvature()[: model.n_coef], model.l2)
    assert not model.penalty_curvature()[model.n_coef:].any()


def test_the_weighted_gram_matrix_appends_the_intercept_last() -> None:
    rng = np.random.default_rng(1)
    X, c = rng.normal(size=(50, 3)), rng.uniform(size=50)
    design = np.c_[X, np.ones(50)]
    np.testing.assert_allclose(weighted_gram(X, c, True), design.T @ (design * c[:, None]), rtol=1e-13)
    np.testing.assert_allclose(weighted_gram(sp.csr_matrix(X), c, False), X.T @ (X * c[:, None]), rtol=1e-13)


def test_models_without_a_hessian_say_so() -> None:
    assert not NegativeBinomial(D, dispersion=None).has_hessian  # the dispersion is a parameter
    assert not Huber(D).has_hessian  # the scale is a parameter, and the loss has no second derivative at the knee
    assert not hasattr(MLP(D, hidden=(3,), n_classes=2), "has_hessian")
    with pytest.raises(TypeError, match=r"NegativeBinomial\(.*\) has no Hessian"):
        NegativeBinomial(D, dispersion=None).hessian_sum(np.zeros(D + 2), np.ones((2, D)), np.ones(2))
