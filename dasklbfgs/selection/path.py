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
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.options import Options
from dasklbfgs.scoring import evaluate
from dasklbfgs.scoring.evaluation import chosen_metrics
from dasklbfgs.scoring.names import HIGHER_IS_BETTER, held_out_names
from dasklbfgs.selection.options import PathOptions
from dasklbfgs.solvers.registry import get_solver, minimize, resolve_options
from dasklbfgs.solvers.sandblaster.cached import CachedDataset, cached

__all__ = ["PathOptions", "PathPlan", "RegularizationPath", "best_of", "regularization_path", "with_penalty"]

#: a path's parameters are kept as one dense array up to this size, as CSR rows above it
DENSE_COEFS_BYTES = 256 * 2**20
#: glmnet's convention for a ridge path's largest penalty: the lasso's, as if the l1 share were 1e-3
RIDGE_SHARE = 1e-3
#: an l1 penalty no coefficient's gradient reaches: the intercept-only model of the path's start
HOLD_AT_ZERO = 1e300
#: what :meth:`RegularizationPath.best` chooses by, by task: the held-out loss
SELECTED_BY = {"classification": "log_loss", "regression": "rmse"}
#: Sandblaster options a path sets itself, or that would undo its fits: each fit starts from
#: the last (x0, online passes), and one checkpoint cannot hold fits of different models
NOT_FOR_A_PATH = {"x0": "each fit starts from the last (the first from the intercept-only model, or from zeros "
                        "with given penalties)",
                  "online_passes": "online passes would move each fit away from the last fit's point",
                  "checkpoint_path": "one checkpoint cannot hold the fits of different penalties",
                  "resume": "one checkpoint cannot hold the fits of different penalties",
                  "eval_every": "the path scores eval_data after each fit itself",
                  "early_stopping": "the path scores eval_data after each fit itself"}


@dataclass
class RegularizationPath:
    """The fits of a :func:`regularization_path`, one row per penalty, strongest first.

    ``penalty`` says which penalty varies (``"l1"``, or ``"l2"``); ``alphas`` are its values;
    ``l1`` and ``l2`` the model's two penalties at each fit (the one not varied is the
    model's own, or keeps the model's ratio to the varied one). ``coefs`` holds each fit's
    parameters (``n_alphas x n_params``, the model's layout: coefficients, then intercepts):
    a dense array up to :data:`DENSE_COEFS_BYTES`, CSR rows above it (glmnet's storage: a
    wide l1 path is mostly zeros); :meth:`coef` gives one fit's as a dense vector either way;
    ``n_nonzero`` the coefficients that are not zero (intercepts not counted); ``optimality``
    the largest entry of the fit's (pseudo-)gradient, 0 at an exact optimum (the KKT
    conditions: a zero coefficient's gradient within its l1 penalty, a non-zero one's
    balanced by it); ``scores`` the held-out metrics of each fit (:func:`dasklbfgs.evaluate`'s,
    by the workers; None without ``eval_data``); ``alpha_max`` the penalty that zeroes every
    coefficient when the path computed its own sequence (None when it was given).
    """

    penalty: str
    alphas: np.ndarray
    l1: np.ndarray
    l2: np.ndarray
    coefs: Any  # np.ndarray, or scipy.sparse.csr_array for a wide path
    objective: np.ndarray
    nit: np.ndarray
    nfev: np.ndarray
    success: np.ndarray
    message: list[str]
    n_nonzero: np.ndarray
    optimality: np.ndarray
    seconds: np.ndarray
    scores: list[dict[str, Any]] | None = None
    alpha_max: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.alphas)

    def coef(self, index: int) -> np.ndarray:
        """The parameters of fit ``index`` (negative counts from the end), dense."""
        row = self.coefs[index]
        return np.asarray(row.toarray() if hasattr(row, "toarray") else row, dtype=np.float64).ravel()

    @property
    def selected_by(self) -> str | None:
        """The held-out metric :meth:`best` chooses by when not told: log-loss for a
        classifier, RMSE for a regression (None without scores)."""
        if not self.scores:
            return None
        return next((name for name in SELECTED_BY.values() if name in self.scores[0]), None)

    def best(self, metric: str | None = None) -> int:
        """The index of the fit with the best held-out ``metric`` (default :attr:`selected_by`;
        higher is better for scores such as accuracy or ROC AUC, lower for losses and errors);
        the first of equals, the strongest penalty; fits the metric is undefined for (NaN)
        are passed over."""
        if not self.scores:
            raise ConfigurationError("the path has no held-out scores to choose by: give it eval_data")
        by_name = {key: [s[key] for s in self.scores] for key in self.scores[0]}
        return best_of(by_name, metric or self.selected_by, "the path's held-out")


def best_of(scores: dict[str, list[Any]], name: str | None, whose: str) -> int:
    """The index of the best of ``scores[name]`` (higher is better for scores such as accuracy,
    lower for losses and errors; NaN passed over; the first of equals)."""
    numbers = sorted(k for k, v in scores.items() if v and np.isscalar(v[0]) and k != "n_samples")
    if name is None or name not in numbers:
        raise ConfigurationError(f"{whose} scores have no {name or 'loss'!r} to choose by; they have "
                                 f"{', '.join(numbers)}")
    values = np.array([float(v) for v in scores[name]])
    if np.all(np.isnan(values)):
        raise ConfigurationError(f"{whose} {name} is undefined (NaN) at every penalty")
    return int(np.nanargmax(values) if name in HIGHER_IS_BETTER else np.nanargmin(values))


def with_penalty(model: LinearModel, *, l1: float, l2: float) -> LinearModel:
    """A copy of ``model`` with the penalties ``l1`` and ``l2``, everything else the same."""
    made = model_from_config({**model_config(model), "l1": float(l1), "l2": float(l2)})
    assert isinstance(made, LinearModel)
    return made


def regularization_path(model: LinearModel, data: Any, *, l1: Sequence[float] | None = None,
                        l2: Sequence[float] | None = None, n_alphas: int = PathOptions.default("n_alphas"),
                        eps: float = PathOptions.default("eps"),
                        eval_data: Any = None, metrics: Sequence[str] | None = None, client: Any = None,
                        callback: Any = None, **options: Any) -> RegularizationPath:
    """Fit ``model`` (a linear model) on ``data`` at a sequence of penalties, each fit warm
    started from the last, all on the shards cached once (Sandblaster L-BFGS, OWL-QN where
    there is an l1 term; ``options`` are its options, as for ``sandblaster_lbfgs``).

    ``l1`` or ``l2``: the values of that penalty to fit at (the other stays the model's);
    neither: the model's own penalty over ``n_alphas`` values from the one that zeroes every
    coefficient down to ``eps`` times it: its l1 with its l2 kept in the same ratio (an
    elastic net path, as glmnet), or with no l1 its l2, from 1000 times the lasso's largest
    penalty (glmnet's ridge convention). The penalties are fitted from the strongest down.
    ``eval_data``: held-out rows scored after each fit by the workers (``metrics``, as
    :func:`dasklbfgs.evaluate` names them; default the held-out loss and the task's score:
    log-loss and accuracy, or RMSE and R²); :meth:`RegularizationPath.best` then picks a
    penalty. ``data`` and ``eval_data`` may be :func:`dasklbfgs.cached` datasets;
    others are cached for the path and released after it. ``callback`` is given to every fit
    (:func:`dasklbfgs.minimize`'s); a fit it stops (``StopIteration``) ends the path with the
    fits so far, and ``path.stats["stopped"]`` says why (None for a whole path). Returns a
    :class:`RegularizationPath`.
    """
    plan = PathPlan.checked(model, PathOptions.from_mapping({"l1_values": l1, "l2_values": l2,
                                                              "n_alphas": n_alphas, "eps": eps}), options)
    return plan.run(data, eval_data=eval_data, metrics=metrics, client=client, callback=callback)


@dataclass(frozen=True)
class PathPlan:
    """A path's checked inputs (everything a bad value could be refused for, before any data
    is cached): the model, which penalty varies and at which values (None: its own
    sequence), and the options of every fit."""

    model: LinearModel
    varied: str
    given: np.ndarray | None
    n_alphas: int
    eps: float
    solver_options: Options
    ratio: float | None  # an elastic net's own path: l2 / l1 kept along it

    @classmethod
    def checked(cls, model: Any, penalties: PathOptions, options: Options | dict[str, Any]) -> PathPlan:
        """The plan of ``model``'s path at ``penalties`` with the Sandblaster ``options`` of
        every fit (an options object, or a mapping of option values)."""
        if not isinstance(model, LinearModel):
            raise ConfigurationError(f"a regularization path varies a linear model's penalty; {model!r} is not "
                                     "one (least squares, logistic, softmax or a GLM: dasklbfgs.models.LinearModel)")
        solver = get_solver("sandblaster")
        if not isinstance(options, Options) and "x0" in options:
            raise ConfigurationError(f"x0 is not an option of a regularization path: {NOT_FOR_A_PATH['x0']}",
                                     parameters=("x0",))
        solver_options = check_path_options(resolve_options(solver, options, {}) if isinstance(options, Options)
                                            else resolve_options(solver, None, options))
        l1, l2 = penalties.l1_values, penalties.l2_values
        if l1 is not None and l2 is not None:
            raise ConfigurationError("give the values of one penalty to vary, l1 or l2, not both (the other stays "
                                     "the model's)")
        values = l1 if l1 is not None else l2
        if values is None and model.l1 == 0 and model.l2 == 0:
            raise ConfigurationError(f"{model!r} has no penalty to vary: give l1= or l2= values, or a model with "
                                     "l1 or l2 > 0 (its path runs from the penalty that zeroes every coefficient)")
        varied = "l1" if l1 is not None else "l2" if l2 is not None else "l1" if model.l1 > 0 else "l2"
        given = None if values is None else np.sort(np.asarray(values, dtype=np.float64))[::-1].copy()
        ratio = model.l2 / model.l1 if given is None and varied == "l1" else None
        return cls(model, varied, given, penalties.n_alphas, penalties.eps, solver_options, ratio)

    def with_alphas(self, alphas: np.ndarray) -> PathPlan:
        """This plan at the penalties ``alphas`` (its own sequence once computed: the ratio stays)."""
        return PathPlan(self.model, self.varied, alphas, self.n_alphas, self.eps, self.solver_options, self.ratio)

    @property
    def alphas(self) -> np.ndarray:
        """The penalties it fits at: given, or set by :meth:`with_alphas` (its own sequence is
        computed on the data: :meth:`alphas_for`)."""
        if self.given is None:
            raise ConfigurationError("this path computes its penalties on the data (alphas_for) before it has any")
        return self.given

    def model_for(self, alpha: float) -> LinearModel:
        """The model at penalty ``alpha`` of the varied kind."""
        return with_penalty(self.model, **_penalties_at(self.model, self.varied, alpha, self.ratio))

    def alphas_for(self, shards: CachedDataset, callback: Any = None) -> tuple[np.ndarray, float | None, Any]:
        """The penalties on ``shards``: the given ones, or the path's own sequence from
        ``alpha_max`` (then also returned, with the fit of the intercept-only model it comes
        from: None without intercepts, where that model is all zeros)."""
        if self.given is not None:
            return self.given, None, None
        alpha_max, bare = _largest_penalty(self.model, shards, self.solver_options, callback)
        scale = 1.0 if self.varied == "l1" else 1.0 / RIDGE_SHARE
        return alpha_max * scale * np.logspace(0.0, np.log10(self.eps), self.n_alphas), alpha_max, bare

    def run(self, data: Any, *, eval_data: Any = None, metrics: Sequence[str] | None = None,
            client: Any = None, callback: Any = None) -> RegularizationPath:
        """The fits on ``data`` (see :func:`regularization_path`)."""
        model = self.model
        names = chosen_metrics(model.task, metrics if metrics is not None else
                               (SELECTED_BY[model.task], *held_out_names(model)))  # refused before any caching
        started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            shards = cached_on(data, client, stack)
            held_out = None if eval_data is None else cached_on(eval_data, shards.client, stack)
            alphas, alpha_max, bare = self.alphas_for(shards, callback)
            start = None if bare is None else bare.x
            fits, scores = [], []
            options, stopped = self.solver_options, None
            for i, alpha in enumerate(alphas):
                penalties = _penalties_at(model, self.varied, float(alpha), self.ratio)
                at = with_penalty(model, **penalties)
                if i == 0 and bare is not None and self.varied == "l1":
                    # the l1 penalty that zeroes every coefficient: its solution is the intercept-only fit
                    # (a second fit from there has no step the objective can resolve: at its optimum already)
                    fitted = bare
                else:
                    fitted = minimize(at, shards, "sandblaster", options, client=shards.client, x0=start,
                                      callback=callback)
                fits.append((penalties, _Fit.of(fitted, sparse=len(alphas) * model.n_params * 8 > DENSE_COEFS_BYTES)))
                if held_out is not None:
                    scores.append(evaluate(at, fitted.x, held_out, metrics=names))
                # the next fit starts where this one ended, its first step scaled by the last known curvature
                start, scale = fitted.x, fitted.stats.get("inverse_hessian_scale")
                if scale is not None:
                    options = self.solver_options.replace(initial_scale=scale)
                if fitted.status == Status.CALLBACK_STOP:  # the callback ended this fit: the path ends with it
                    stopped = str(fitted.message)
                    break
        path = _collected(model, self.varied, alphas[: len(fits)], fits, alpha_max, time.perf_counter() - started)
        path.scores = scores if held_out is not None else None
        path.stats["stopped"] = stopped
        return path


def check_path_options(options: Options, where: str = "") -> Options:
    """Sandblaster ``options`` for every fit of a path: refused (naming the first, after
    ``where``) when one a path sets itself, or that would undo its fits, is set."""
    defaults = get_solver("sandblaster").options
    for name, why in NOT_FOR_A_PATH.items():
        if name != "x0" and getattr(options, name) != defaults.default(name):
            raise ConfigurationError(f"{where}{name} is not an option of a regularization path: {why}",
                                     parameters=(name,))
    return options


def cached_on(data: Any, client: Any, stack: contextlib.ExitStack) -> CachedDataset:
    """``data`` itself if it is cached already (on ``client``, if given), else cached for the
    path (released with ``stack``)."""
    if isinstance(data, CachedDataset):
        data.shard_cache(data.client if client is None else client)  # closed, or on another client: refused
        return data
    return stack.enter_context(cached(data, client=client))


def _largest_penalty(model: LinearModel, shards: CachedDataset, options: Options, callback: Any = None
                     ) -> tuple[float, Any]:
    """The l1 penalty from which every coefficient is zero, ``max_j |dL/dw_j|`` at the
    intercept-only model, and that model's fit (None without intercepts: all zeros)."""
    fitted = None
    start = model.init_params()  # zeros, but for a model with a start of its own (Huber's scale)
    if model.fit_intercept:  # OWL-QN holds every coefficient at zero below an l1 no gradient reaches
        fitted = minimize(with_penalty(model, l1=HOLD_AT_ZERO, l2=0.0), shards, "sandblaster", options,
                          client=shards.client, callback=callback)
        start = fitted.x
    _, gradient = shards.objective(with_penalty(model, l1=0.0, l2=0.0), start)
    return float(np.max(np.abs(gradient[: model.n_coef]))), fitted


def _penalties_at(model: LinearModel, varied: str, alpha: float, ratio: float | None) -> dict[str, float]:
    if varied == "l1":
        return {"l1": alpha, "l2": model.l2 if ratio is None else alpha * ratio}
    return {"l1": model.l1, "l2": alpha}


@dataclass(frozen=True)
class _Fit:
    """What a path keeps of one fit (not its dense pseudo-gradient and history: a wide path
    holds many): the parameters (a CSR row when sparse), the objective and the counts."""

    x: Any
    fun: float
    nit: int
    nfev: int
    success: bool
    message: str
    optimality: float
    seconds: float

    @classmethod
    def of(cls, result: Any, *, sparse: bool) -> _Fit:
        from scipy import sparse as sp

        x = sp.csr_array(np.asarray(result.x, dtype=np.float64)[None, :]) if sparse else np.array(result.x)
        return cls(x, float(result.fun), int(result.nit), int(result.nfev), bool(result.success), str(result.message),
                   float(np.max(np.abs(result.jac))) if result.jac is not None else np.nan,
                   float(result.stats.get("total_seconds", np.nan)))


def _collected(model: LinearModel, varied: str, alphas: np.ndarray, fits: list[tuple[dict[str, float], _Fit]],
               alpha_max: float | None, seconds: float) -> RegularizationPath:
    from scipy import sparse as sp

    results = [fitted for _, fitted in fits]
    sparse = bool(results) and sp.issparse(results[0].x)
    coefs: Any = sp.vstack([r.x for r in results], format="csr") if sparse else np.stack([r.x for r in results])
    n_nonzero = (np.diff(coefs[:, : model.n_coef].indptr) if sparse
                 else np.count_nonzero(coefs[:, : model.n_coef], axis=1))
    return RegularizationPath(
        penalty=varied, alphas=np.asarray(alphas, dtype=np.float64),
        l1=np.array([p["l1"] for p, _ in fits]), l2=np.array([p["l2"] for p, _ in fits]),
        coefs=coefs, objective=np.array([r.fun for r in results]),
        nit=np.array([r.nit for r in results]), nfev=np.array([r.nfev for r in results]),
        success=np.array([r.success for r in results]), message=[r.message for r in results],
        n_nonzero=np.asarray(n_nonzero), optimality=np.array([r.optimality for r in results]),
        seconds=np.array([r.seconds for r in results]),
        alpha_max=alpha_max, stats={"seconds": seconds, "fits": len(results)},
    )
