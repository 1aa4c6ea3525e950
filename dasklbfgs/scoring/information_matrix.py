"""The Fisher information of a linear GLM's parameters (``Xa^T diag(weights) Xa``,
:func:`~dasklbfgs.models.gram.weighted_gram`): the diagonal of its inverse and its rank
(:func:`inverse_diagonal`), and the size :func:`~dasklbfgs.scoring.inference.inference`
allows it (:func:`check_width`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dasklbfgs._format import human_bytes
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.scoring.glm_family import EPS

if TYPE_CHECKING:
    from dasklbfgs.models.linear import LinearModel

__all__ = ["INFORMATION_LIMIT_BYTES", "check_width", "inverse_diagonal"]

#: the largest information matrix (``n_params^2`` float64) :func:`inference` forms: each task
#: holds one, and this process one and its factor
INFORMATION_LIMIT_BYTES = 2 * 2**30


def inverse_diagonal(information: np.ndarray) -> tuple[np.ndarray, int]:
    """The diagonal of the inverse of the information matrix, and its rank.

    The matrix is scaled to a unit diagonal first (its conditioning is then the features'
    correlation's, not their units'). A well-conditioned one is inverted through its
    Cholesky factor ``U`` (``diag(J^-1)`` is the row sums of squares of ``U^-1``); a singular
    or nearly singular one (collinear features) through its eigenvalues, the pseudo-inverse
    over those above ``n eps`` of the largest, its rank their count. A parameter whose
    diagonal entry is 0 (a feature with no value in any row of positive weight) gets NaN and
    does not count in the rank."""
    from scipy.linalg import lapack

    diagonal = np.diag(information).copy()
    kept = np.flatnonzero(diagonal > 0)
    found = np.full(diagonal.shape, np.nan)
    if kept.size == 0:
        return found, 0
    unit = 1.0 / np.sqrt(diagonal[kept])
    scaled = information[np.ix_(kept, kept)]
    scaled *= unit[:, None]
    scaled *= unit[None, :]
    factor, info = lapack.dpotrf(scaled, lower=0, clean=1, overwrite_a=0)
    pivots = np.diag(factor)
    if info == 0 and pivots.min() ** 2 > kept.size * EPS * pivots.max() ** 2:
        inverse, info = lapack.dtrtri(factor, lower=0, overwrite_c=1)
        if info == 0:
            found[kept] = np.einsum("ij,ij->i", inverse, inverse) * unit**2
            return found, int(kept.size)
    values, vectors = np.linalg.eigh(scaled)
    above = values > values.max() * kept.size * EPS
    found[kept] = (vectors[:, above] ** 2 / values[above]).sum(axis=1) * unit**2
    return found, int(above.sum())


def check_width(model: LinearModel) -> None:
    """Refuse a model whose information matrix would pass :data:`INFORMATION_LIMIT_BYTES`."""
    n = model.n_params
    size = n * n * 8
    if size > INFORMATION_LIMIT_BYTES:
        raise ConfigurationError(
            f"inference forms the {n} x {n} information matrix of {model!r} (d = {model.n_features} features"
            f"{' and the intercept' if model.fit_intercept else ''}), {size} bytes ({human_bytes(size)}), more than "
            f"the {human_bytes(INFORMATION_LIMIT_BYTES)} it allows: too wide (hashed or one-hot features?); select or "
            "aggregate the features, then refit")
