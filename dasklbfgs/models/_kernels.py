"""Per-block link functions of the generalised linear models (the hot path).

Each ``*_link(z, y, w)`` takes margins ``z`` of one row block (in cache) and returns the
loss *sum* of that block and ``dloss/dz``; with row weights ``w``, the weighted sum
``sum_i w_i loss_i`` and ``w_i dloss_i/dz_i`` (``None``: every weight 1, the fast path). They avoid
``np.where`` and scipy's special functions, which cost more than the matrix products on this
path, and they never overflow: every ``exp`` is of a non-positive number.
"""

from __future__ import annotations

import math

import numpy as np

CACHE_BLOCK_BYTES = 3 * 2**19  # 1.5 MiB: a row block stays in a 2 MiB L2 between products


def block_rows(n_features: int, itemsize: int) -> int:
    """Rows per block so that one block of X fits the cache budget."""
    return int(np.clip(CACHE_BLOCK_BYTES // max(n_features * itemsize, 1), 64, 65_536))


def _sum(a: np.ndarray) -> float:
    """Sum in float64 whatever the block's dtype: float32 sums are too noisy for ftol."""
    return float(a.sum(dtype=np.float64))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype == np.float64 and b.dtype == np.float64:
        return float(a @ b)
    return float(np.dot(a.astype(np.float64), b.astype(np.float64)))


def squared_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Least squares: loss 0.5 (z - y)^2, derivative z - y."""
    r = np.subtract(z, y, out=z)
    if w is None:
        return 0.5 * _dot(r, r), r
    weighted = r * w
    return 0.5 * _dot(weighted, r), weighted.astype(r.dtype, copy=False)


def tweedie_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *,
                 power: float) -> tuple[float, np.ndarray]:
    """The Tweedie family with the log link (mean ``mu = e^z``): loss the half unit deviance
    less what depends on ``y`` alone, derivative ``mu^(2 - p) - y mu^(1 - p)``; ``p = 1`` is
    Poisson (``e^z - y z``), ``p = 2`` Gamma (``z + y e^-z``), else
    ``e^((2 - p) z) / (2 - p) - y e^((1 - p) z) / (1 - p)`` (scikit-learn's half Tweedie loss)."""
    z = np.asarray(z, dtype=np.float64)
    if power == 1.0:
        mu = np.exp(z)
        terms, dz = mu - y * z, mu - y
    elif power == 2.0:
        scaled = y * np.exp(-z)
        terms, dz = z + scaled, 1.0 - scaled
    else:
        low, high = y * np.exp((1.0 - power) * z), np.exp((2.0 - power) * z)
        terms, dz = high / (2.0 - power) - low / (1.0 - power), high - low
    if w is None:
        return _sum(terms), dz
    return _dot(w, terms), dz * w


def negative_binomial_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *,
                           dispersion: float) -> tuple[float, np.ndarray]:
    """NB2 with the log link (mean ``mu = e^z``, variance ``mu + a mu^2``, ``a`` the
    ``dispersion``): loss the negative log-likelihood less its log-gamma terms,
    ``(y + 1/a) log(1 + a mu) - y z - y log a``, derivative ``(mu - y) / (1 + a mu)``
    (:func:`_negative_binomial_parts`)."""
    terms, dz, _ = _negative_binomial_parts(z, y, dispersion)
    if w is None:
        return _sum(terms), dz
    return _dot(w, terms), dz * w


def negative_binomial_dispersion_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *,
                                      dispersion: float) -> tuple[float, np.ndarray, float]:
    """:func:`negative_binomial_link` with the dispersion ``a`` a parameter: the loss adds the
    log-gamma terms that depend on ``a``, ``log Γ(1/a) - log Γ(y + 1/a)`` (the full negative
    log-likelihood less ``log Γ(y + 1)``), and the derivative in ``a``,
    ``(mu - y) / (a (1 + a mu)) - (log(1 + a mu) + ψ(1/a) - ψ(y + 1/a)) / a^2``, comes third
    (summed, weighted). For ``a <= 0`` (or NaN), outside the domain, the loss is ``+inf``."""
    from scipy.special import digamma, gammaln

    if not dispersion > 0:
        return math.inf, np.zeros_like(np.asarray(z, dtype=np.float64)), 0.0
    inverse = 1.0 / dispersion
    terms, dz, softplus = _negative_binomial_parts(z, y, dispersion)
    terms += gammaln(inverse) - gammaln(y + inverse)
    d_a = dz * inverse - (softplus + (digamma(inverse) - digamma(y + inverse))) * inverse**2
    if w is None:
        return _sum(terms), dz, _sum(d_a)
    return _dot(w, terms), dz * w, _dot(w, d_a)


def _negative_binomial_parts(z: np.ndarray, y: np.ndarray, dispersion: float
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, NB2's loss term and ``dloss/dz`` (see :func:`negative_binomial_link`) and
    ``log(1 + a mu)``. With ``t = z + log a`` (so ``a mu = e^t``), ``m = min(t, 0)``,
    ``M = max(t, 0)``, ``u = e^m``, ``v = e^-M`` (one of them is 1, the other ``e^-|t|``) and
    ``l = log(1 + u v)``: the loss is ``y (l - m) + (M + l) / a`` (``y softplus(-t) +
    softplus(t) / a``, two non-negative terms), the derivative ``(u / a - y v) / (u + v)`` and
    ``log(1 + a mu) = M + l``: every ``exp`` of a number ``<= 0``, nothing overflows."""
    z = np.asarray(z, dtype=np.float64)
    t = z + math.log(dispersion)
    low, high = np.minimum(t, 0.0), np.maximum(t, 0.0)
    u, v = np.exp(low), np.exp(-high)
    shared = np.log1p(u * v)
    terms = y * (shared - low) + (high + shared) / dispersion
    dz = (u / dispersion - y * v) / (u + v)
    return terms, dz, high + shared


def gamma_inverse_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Gamma with the canonical inverse link (mean ``mu = 1/z``, defined for ``z > 0``): loss
    the half deviance less what depends on ``y`` alone, ``y z - log z``, derivative
    ``y - 1/z``. Outside the domain (some ``z <= 0``, or NaN) the loss is ``+inf`` and the
    derivative 0: a line search takes the step as too long and backtracks."""
    z = np.asarray(z, dtype=np.float64)
    if not np.all(z > 0):
        return math.inf, np.zeros_like(z)
    terms, dz = y * z - np.log(z), y - 1.0 / z
    if w is None:
        return _sum(terms), dz
    return _dot(w, terms), dz * w


def huber_scale_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *, epsilon: float,
                     scale: float) -> tuple[float, np.ndarray, float]:
    """Huber's loss with a concomitant scale ``sigma`` (``scale``; Owen 2007, scikit-learn's
    ``HuberRegressor``): with the residual ``r = y - z``, the loss ``sigma + sigma H(r / sigma)``,
    ``H(t) = t^2`` for ``|t| <= epsilon`` else ``2 epsilon |t| - epsilon^2``, is

        |r| <= epsilon sigma:  sigma + r^2 / sigma            d/dz: -2 r / sigma     d/dsigma: 1 - r^2 / sigma^2
        otherwise:             sigma + 2 epsilon |r| - epsilon^2 sigma
                                                               d/dz: -2 epsilon sign(r)   d/dsigma: 1 - epsilon^2

    Returns the loss sum, ``dloss/dz`` and the sum of ``dloss/dsigma`` (weighted by ``w``). With
    ``psi = clip(r, -epsilon sigma, epsilon sigma)`` both branches are one form: the loss is
    ``sigma + psi (2 r - psi) / sigma``, ``dloss/dz = -2 psi / sigma`` and ``dloss/dsigma =
    1 - (psi / sigma)^2``. For ``sigma <= 0`` (or NaN), outside the domain, the loss is ``+inf``
    and the derivatives 0, as :func:`gamma_inverse_link` outside its own."""
    z = np.asarray(z, dtype=np.float64)
    if not scale > 0:
        return math.inf, np.zeros_like(z), 0.0
    r = np.subtract(y, z)
    threshold = epsilon * scale
    psi = np.clip(r, -threshold, threshold)
    share = psi / scale
    terms = share * (2.0 * r - psi)
    terms += scale
    d_scale = 1.0 - share * share
    dz = -2.0 * share
    if w is None:
        return _sum(terms), dz, _sum(d_scale)
    return _dot(w, terms), dz * w, _dot(w, d_scale)


def huber_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *, epsilon: float,
               scale: float) -> tuple[float, np.ndarray]:
    """Huber's loss at a fixed ``scale``: :func:`huber_scale_link`'s loss and ``dloss/dz``,
    ``scale + scale H((y - z) / scale)`` (the constant ``scale`` kept, so the loss is the
    jointly scaled model's at that scale)."""
    loss, dz, _ = huber_scale_link(z, y, w, epsilon=epsilon, scale=scale)
    return loss, dz


def logistic_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Logistic: loss log(1 + e^z) - y z, derivative sigmoid(z) - y.

    With a = |z| and e = exp(-a): log(1 + e^z) = max(z, 0) + log(1 + e) and
    sigmoid(z) = 1/2 + sign(z) (1 - e) / (2 (1 + e)); both are stable for any z.
    """
    a = np.abs(z)
    total, dot = (_sum, _dot) if w is None else (lambda v: _dot(w, v), lambda u, v: _dot(w * u, v))
    loss = 0.5 * (total(a) + total(z)) - dot(y, z)
    np.negative(a, out=a)
    e = np.exp(a, out=a)
    s = np.subtract(1.0, e)
    e += 1.0
    s /= e
    loss += total(np.log(e, out=e))
    np.copysign(s, z, out=s)
    s *= 0.5
    s += 0.5
    s -= y
    if w is not None:
        s *= w
    return loss, s


def softmax_link(z: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Softmax cross-entropy: loss logsumexp(z) - z_y, derivative softmax(z) - onehot(y)."""
    rows = np.arange(z.shape[0])
    labels = y.astype(np.intp, copy=False)
    total_of = _sum if w is None else (lambda v: _dot(w, v.ravel()))
    z -= z.max(axis=1, keepdims=True)
    # With z shifted by its row max m: loss = log(sum exp(z - m)) - (z_y - m).
    loss = -total_of(z[rows, labels])
    p = np.exp(z, out=z)
    total = p.sum(axis=1, keepdims=True)
    loss += total_of(np.log(total))
    p /= total
    p[rows, labels] -= 1.0
    if w is not None:
        p *= w[:, None]
    return loss, p


def softmax_rows(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of scores ``z`` (n, K), shifted by the row max: no overflow."""
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


# -- curvatures: per row, the second derivative of a link's loss in z (the Newton procedure) --

def logistic_curvature(z: np.ndarray) -> np.ndarray:
    """``sigmoid(z) (1 - sigmoid(z)) = e^-|z| / (1 + e^-|z|)^2``: no overflow."""
    e = np.exp(-np.abs(np.asarray(z, dtype=np.float64)))
    return e / (1.0 + e) ** 2


def tweedie_curvature(z: np.ndarray, y: np.ndarray, *, power: float) -> np.ndarray:
    """:func:`tweedie_link`'s: ``(2 - p) mu^(2 - p) - (1 - p) y mu^(1 - p)`` (``e^z`` for
    Poisson, ``y e^-z`` for Gamma); never negative for ``1 <= p <= 2`` and ``y >= 0``."""
    z = np.asarray(z, dtype=np.float64)
    if power == 1.0:
        return np.exp(z)
    if power == 2.0:
        return y * np.exp(-z)
    return (2.0 - power) * np.exp((2.0 - power) * z) - (1.0 - power) * y * np.exp((1.0 - power) * z)


def negative_binomial_curvature(z: np.ndarray, y: np.ndarray, *, dispersion: float) -> np.ndarray:
    """:func:`negative_binomial_link`'s: ``mu (1 + a y) / (1 + a mu)^2``; with ``t = z + log a``
    (``a mu = e^t``) that is ``(1 + a y) / a * sigmoid(t) sigmoid(-t)``: no overflow."""
    t = np.asarray(z, dtype=np.float64) + math.log(dispersion)
    return (1.0 + dispersion * y) / dispersion * logistic_curvature(t)


def gamma_inverse_curvature(z: np.ndarray) -> np.ndarray:
    """:func:`gamma_inverse_link`'s: ``1 / z^2``."""
    z = np.asarray(z, dtype=np.float64)
    return 1.0 / (z * z)
