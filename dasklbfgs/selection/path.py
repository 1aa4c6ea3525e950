"""Regularization paths: one linear model fitted at a sequence of penalties, warm started,
on one set of cached shards (:func:`regularization_path`).

As glmnet and scikit-learn's ``lasso_path`` do: the penalties run from the strongest down,
each fit starts from the previous one's solution (a few iterations each where a cold fit
needs dozens), and without a given sequence the l1 penalties run over ``n_alphas`` values
spaced evenly on a log scale from the smallest that zeroes every coefficient,
``max_j |dL/dw_j|`` at the fitted intercept-only model, down to ``eps`` times it. Every fit
is a Sandblaster run on the same cached shards (:func:`dasklbfgs.cached`): the rows are
read from the store once for the whole path.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.persist import model_config, model_from_config
from dasklbfgs.solvers.registry import minimize
from dasklbfgs.solvers.sandblaster.cached import CachedDataset, cached

__all__ = ["RegularizationPath", "regularization_path", "with_penalty"]

#: glmnet's convention for a ridge path's largest penalty: the lasso's, as if the l1 share were 1e-3
RIDGE_SHARE = 1e-3
#: an l1 penalty no coefficient's gradient reaches: the intercept-only model of the path's start
HOLD_AT_ZERO = 1e300


@dataclass
class RegularizationPath:
    """The fits of a :func:`regularization_path`, one row per penalty, strongest first.

    ``penalty`` says which penalty varies (``"l1"``, or ``"l2"``); ``alphas`` are its values;
    ``l1`` and ``l2`` the model's two penalties at each fit (the one not varied is the
    model's own, or keeps the model's ratio to the varied one). ``coefs`` holds each fit's
    parameters (``n_alphas x n_params``, the model's layout: coefficients, then intercepts);
    ``n_nonzero`` the coefficients that are not zero (intercepts not counted); ``optimality``
    the largest entry of the fit's (pseudo-)gradient, 0 at an exact optimum (the KKT
    conditions: a zero coefficient's gradient within its l1 penalty, a non-zero one's
    balanced by it); ``scores`` the held-out metrics of each fit (``eval_*``; None without
    ``eval_data``); ``alpha_max`` the penalty that zeroes every coefficient when the path
    computed its own sequence (None when it was given).
    """

    penalty: str
    alphas: np.ndarray
    l1: np.ndarray
    l2: np.ndarray
    coefs: np.ndarray
    objective: np.ndarray
    nit: np.ndarray
    nfev: np.ndarray
    success: np.ndarray
    message: list[str]
    n_nonzero: np.ndarray
    optimality: np.ndarray
    seconds: np.ndarray
    scores: list[dict[str, float]] | None = None
    alpha_max: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.alphas)


def with_penalty(model: LinearModel, *, l1: float, l2: float) -> LinearModel:
    """A copy of ``model`` with the penalties ``l1`` and ``l2``, everything else the same."""
    made = model_from_config({**model_config(model), "l1": float(l1), "l2": float(l2)})
    assert isinstance(made, LinearModel)
    return made


def regularization_path(model: LinearModel, data: Any, *, l1: Sequence[float] | None = None,
                        l2: Sequence[float] | None = None, n_alphas: int = 50, eps: float = 1e-3,
                        eval_data: Any = None, client: Any = None, **options: Any) -> RegularizationPath:
    """Fit ``model`` (a linear model) on ``data`` at a sequence of penalties, each fit warm
    started from the last, all on the shards cached once (Sandblaster L-BFGS, OWL-QN where
    there is an l1 term; ``options`` are its options, as for ``sandblaster_lbfgs``).

    ``l1`` or ``l2``: the values of that penalty to fit at (the other stays the model's);
    neither: the model's own penalty over ``n_alphas`` values from the one that zeroes every
    coefficient down to ``eps`` times it: its l1 with its l2 kept in the same ratio (an
    elastic net path, as glmnet), or with no l1 its l2, from 1000 times the lasso's largest
    penalty (glmnet's ridge convention). The penalties are fitted from the strongest down.
    ``data`` and ``eval_data`` (held-out rows scored after each fit) may be
    :func:`dasklbfgs.cached` datasets; others are cached for the path and released after it.
    Returns a :class:`RegularizationPath`.
    """
    if not isinstance(model, LinearModel):
        raise ConfigurationError(f"a regularization path varies a linear model's penalty; {model!r} is not one "
                                 "(LeastSquares, Logistic or Softmax)")
    if "x0" in options:
        raise ConfigurationError("x0 is not an option of a regularization path: each fit starts from the last "
                                 "(the first from the intercept-only model)")
    if l1 is not None and l2 is not None:
        raise ConfigurationError("give the values of one penalty to vary, l1 or l2, not both (the other stays the "
                                 "model's)")
    varied = "l1" if l1 is not None else "l2" if l2 is not None else "l1" if model.l1 > 0 else "l2"
    given = _penalties(l1 if l1 is not None else l2, varied)
    if given is None:
        if model.l1 == 0 and model.l2 == 0:
            raise ConfigurationError(f"{model!r} has no penalty to vary: give l1= or l2= values, or a model with "
                                     "l1 or l2 > 0 (its path runs from the penalty that zeroes every coefficient)")
        _check_grid(n_alphas, eps)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        shards = _cached(data, client, stack)
        held_out = None if eval_data is None else _cached(eval_data, shards.client, stack)
        alpha_max = None
        if given is None:
            alpha_max, start = _largest_penalty(model, shards, options)
            scale = 1.0 if varied == "l1" else 1.0 / RIDGE_SHARE
            alphas = alpha_max * scale * np.logspace(0.0, np.log10(eps), n_alphas)
        else:
            alphas, start = given, None
        ratio = model.l2 / model.l1 if given is None and varied == "l1" else None
        fits = []
        for alpha in alphas:
            penalties = _penalties_at(model, varied, float(alpha), ratio)
            fitted = minimize(with_penalty(model, **penalties), shards, "sandblaster", client=shards.client,
                              x0=start, eval_data=held_out, **options)
            fits.append((penalties, fitted))
            start = fitted.x
    return _collected(model, varied, alphas, fits, held_out is not None, alpha_max, time.perf_counter() - started)


def _penalties(values: Sequence[float] | None, name: str) -> np.ndarray | None:
    """The given penalties, strongest first; each finite and >= 0."""
    if values is None:
        return None
    try:
        found = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a sequence of penalties >= 0, got {values!r}") from None
    if found.ndim != 1 or found.size == 0:
        raise ConfigurationError(f"{name} must be a non-empty sequence of penalties >= 0, got {values!r}")
    bad = ~np.isfinite(found) | (found < 0)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise ConfigurationError(f"{name}[{at}] must be a finite penalty >= 0, got {float(found[at])!r}")
    return np.sort(found)[::-1].copy()


def _check_grid(n_alphas: Any, eps: Any) -> None:
    if isinstance(n_alphas, bool) or not isinstance(n_alphas, (int, np.integer)) or n_alphas < 1:
        raise ConfigurationError(f"n_alphas must be a positive integer, got {n_alphas!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ConfigurationError(f"eps (the smallest penalty as a fraction of the largest) must be in (0, 1), "
                                 f"got {eps!r}")


def _cached(data: Any, client: Any, stack: contextlib.ExitStack) -> CachedDataset:
    """``data`` itself if it is cached already, else cached for the path (released with ``stack``)."""
    if isinstance(data, CachedDataset):
        return data
    return stack.enter_context(cached(data, client=client))


def _largest_penalty(model: LinearModel, shards: CachedDataset, options: dict[str, Any]
                     ) -> tuple[float, np.ndarray]:
    """The l1 penalty from which every coefficient is zero, ``max_j |dL/dw_j|`` at the
    intercept-only model (fitted, when the model has intercepts), and that model's parameters."""
    bare = with_penalty(model, l1=0.0, l2=0.0)
    start = np.zeros(model.n_params)
    if model.fit_intercept:  # OWL-QN holds every coefficient at zero below an l1 no gradient reaches
        start = minimize(with_penalty(model, l1=HOLD_AT_ZERO, l2=0.0), shards, "sandblaster",
                         client=shards.client, **options).x
    _, gradient = shards.objective(bare, start)
    return float(np.max(np.abs(gradient[: model.n_coef]))), start


def _penalties_at(model: LinearModel, varied: str, alpha: float, ratio: float | None) -> dict[str, float]:
    if varied == "l1":
        return {"l1": alpha, "l2": model.l2 if ratio is None else alpha * ratio}
    return {"l1": model.l1, "l2": alpha}


def _collected(model: LinearModel, varied: str, alphas: np.ndarray, fits: list[tuple[dict[str, float], Any]],
               scored: bool, alpha_max: float | None, seconds: float) -> RegularizationPath:
    results = [fitted for _, fitted in fits]
    coefs = np.stack([r.x for r in results])
    scores = None
    if scored:
        scores = [{k: v for k, v in r.history[-1].items() if k.startswith("eval_")} if r.history else {}
                  for r in results]
    return RegularizationPath(
        penalty=varied, alphas=np.asarray(alphas, dtype=np.float64),
        l1=np.array([p["l1"] for p, _ in fits]), l2=np.array([p["l2"] for p, _ in fits]),
        coefs=coefs, objective=np.array([r.fun for r in results]),
        nit=np.array([r.nit for r in results]), nfev=np.array([r.nfev for r in results]),
        success=np.array([bool(r.success) for r in results]), message=[str(r.message) for r in results],
        n_nonzero=np.count_nonzero(coefs[:, : model.n_coef], axis=1),
        optimality=np.array([float(np.max(np.abs(r.jac))) if r.jac is not None else np.nan for r in results]),
        seconds=np.array([r.stats.get("total_seconds", np.nan) for r in results]),
        scores=scores, alpha_max=alpha_max, stats={"seconds": seconds, "fits": len(results)},
    )
