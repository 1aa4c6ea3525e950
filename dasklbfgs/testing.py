"""The model contract's conformance checks, for any model: :func:`check_model`.

Run a model of your own through them before you hand it to a cluster (as scikit-learn's
``check_estimator`` for an estimator); every shipped model and ``TorchModel`` pass them in
dasklbfgs's own tests.
"""

from __future__ import annotations

import tempfile
import threading
from typing import Any

import cloudpickle
import numpy as np

from dasklbfgs.data import ShardedDataset
from dasklbfgs.errors import ModelDataMismatchError
from dasklbfgs.models.contract import as_model

__all__ = ["check_model"]

#: coordinates whose derivative the finite-difference check compares (at most)
FD_COORDINATES = 24


def _expect(holds: Any, message: str) -> None:
    """Raise ``AssertionError(message)`` unless ``holds`` (kept under ``python -O``, unlike ``assert``)."""
    if not holds:
        raise AssertionError(message)


def check_model(model: Any, X: Any, y: Any, w: Any = None, *, seed: int = 0, float32: bool | None = None
                ) -> list[str]:
    """Run ``model`` through the contract's checks on the rows ``X, y`` (and weights ``w``),
    in this process; raise ``AssertionError`` naming the first that fails. Returns the
    names of the checks that ran.

    - ``contract``: the members :class:`~dasklbfgs.models.ModelContract` lists, and a
      starting vector of ``n_params`` finite values, the same for the same seed;
    - ``split_sums``: the loss and gradient sums over three parts of the rows add up to the
      whole's (to rounding: the solvers add portions' sums);
    - ``gradient``: the objective's gradient matches central finite differences on up to
      24 coordinates, each to its own size;
    - ``pickle``: the model sent as Dask sends it (cloudpickle) and used on another thread
      gives the same bits;
    - ``predict``: one prediction per row (class probabilities summing to 1 for a classifier);
    - ``refuses``: a dataset with another number of features is refused with
      :class:`~dasklbfgs.errors.ModelDataMismatchError` before any work.

    ``float32``: whether the model computes in float32, which loosens the tolerances (by
    default: when ``X`` or the model's ``dtype`` is float32 or narrower).
    """
    wrapped = as_model(model)  # the contract's members, or a ConfigurationError naming the missing ones
    y = np.asarray(y)
    n = y.shape[0]
    _expect(n >= 3, f"check_model needs 3 rows or more, got {n}")
    _expect(w is None or wrapped.accepts_weights, f"{wrapped!r} was given weights w, but its loss_grad_sum takes none")
    x = wrapped.init_params(seed)
    _expect(x.shape == (wrapped.n_params,), f"init_params gave shape {x.shape}, not (n_params,) = "
                                            f"({wrapped.n_params},)")
    _expect(np.all(np.isfinite(x)), "init_params gave non-finite values")
    _expect(np.array_equal(x, wrapped.init_params(seed)), f"init_params({seed}) differs between two calls")
    if not np.any(x):  # a start at zero: check the sums somewhere less special
        x = x + np.random.default_rng(seed).normal(scale=0.1, size=x.shape)
    checked = ["contract"]
    narrow = _narrow(model, X) if float32 is None else float32
    rounding = 1e-5 if narrow else 1e-10

    loss, grad = wrapped.sums_of(x, X, y, w)
    _expect(np.shape(grad) == (wrapped.n_sums,), f"loss_grad_sum's gradient has shape {np.shape(grad)}, not "
                                                 f"({wrapped.n_sums},)")
    cuts = [0, n // 3, (2 * n) // 3, n]
    parts = [wrapped.sums_of(x, X[a:b], y[a:b], None if w is None else w[a:b]) for a, b in zip(cuts, cuts[1:])]
    part_loss, part_grad = sum(p[0] for p in parts), sum(p[1] for p in parts)
    _expect(abs(part_loss - loss) <= rounding * max(abs(loss), 1.0),
            f"the loss sums over three parts of the rows add up to {part_loss!r}, the whole's is {loss!r}")
    worst = float(np.max(np.abs(part_grad - grad)))
    _expect(worst <= 10 * rounding * max(float(np.max(np.abs(grad))), 1.0),
            f"the gradient sums over three parts of the rows differ from the whole's by {worst!r}")
    checked.append("split_sums")

    total = None if w is None else float(np.sum(w))

    def objective(p: np.ndarray) -> float:
        return wrapped.objective(p, X, y, w, n=total)[0]

    value, gradient = wrapped.objective(x, X, y, w, n=total)
    tolerance, step, eps = (2e-2, 1e-3, 2.0**-23) if narrow else (1e-5, 1e-6, 2.0**-52)
    # what rounding leaves of a difference quotient: the objective's rounding over the step
    floor = max(1e-7 * float(np.max(np.abs(gradient))), 8 * eps * max(abs(value), 1.0) / step)
    rng = np.random.default_rng(seed)
    for j in rng.choice(x.size, size=min(x.size, FD_COORDINATES), replace=False):
        e = np.zeros_like(x)
        e[j] = step * max(1.0, abs(x[j]))
        numeric = (objective(x + e) - objective(x - e)) / (2 * e[j])
        _expect(abs(numeric - gradient[j]) <= tolerance * max(abs(numeric), abs(gradient[j])) + floor,
                f"the gradient's coordinate {j} is {gradient[j]!r}, central differences give {numeric!r}")
    checked.append("gradient")

    shipped = cloudpickle.loads(cloudpickle.dumps(wrapped))
    again: list[Any] = []
    elsewhere = threading.Thread(target=lambda: again.append(shipped.sums_of(x, X, y, w)))  # a worker's own thread
    elsewhere.start()
    elsewhere.join()
    _expect(again and again[0][0] == loss and np.array_equal(again[0][1], grad),
            "the model pickled (as Dask sends it) and used on another thread sums other bits")
    checked.append("pickle")

    predicted = np.asarray(wrapped.predict(x, X))
    _expect(predicted.shape[0] == n, f"predict gave {predicted.shape[0]} rows for {n}")
    if wrapped.task == "classification":
        proba = np.asarray(wrapped.predict_proba(x, X))  # type: ignore[attr-defined]
        _expect(proba.shape[0] == n and np.allclose(proba.sum(axis=1), 1.0), "predict_proba's rows do not sum to 1")
    checked.append("predict")

    with tempfile.TemporaryDirectory() as folder:
        wider = np.zeros((3, wrapped.n_features + 1))
        other = ShardedDataset.create(f"{folder}/wider", wider, np.zeros(3), shard_rows=3)
        try:
            wrapped.check_data(other)
        except ModelDataMismatchError:
            checked.append("refuses")
        else:
            raise AssertionError(f"{wrapped!r} took a dataset of {wrapped.n_features + 1} features")
    return checked


def _narrow(model: Any, X: Any) -> bool:
    """Whether the model computes in float32 or narrower: its data's dtype, or its own
    (a torch module's)."""
    dtypes = [str(getattr(X, "dtype", "float64")), str(getattr(model, "dtype", "float64"))]
    return any(name.endswith(("float32", "float16")) or "bfloat16" in name for name in dtypes)
