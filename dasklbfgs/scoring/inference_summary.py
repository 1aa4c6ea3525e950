"""What :func:`~dasklbfgs.scoring.inference.inference` returns (:class:`Inference`, statsmodels'
``GLMResults`` figures) and its printable table, laid out as statsmodels' GLM summary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Inference"]


@dataclass(frozen=True, eq=False)
class Inference:
    """Inference for a GLM's parameters, statsmodels' ``GLMResults`` figures.

    ``coef``, ``names``, ``std_err``, ``z``, ``p_values`` and ``conf_int`` (n x 2) follow the
    parameters' layout: coefficients, then the intercept. ``std_err`` is
    ``sqrt(diag(scale * J^-1))`` with ``J`` the Fisher information summed over the rows;
    ``z`` is ``coef / std_err`` (a t statistic when the scale is estimated), and the p-values
    and intervals use the normal distribution even then, as statsmodels' GLM does by default
    (``use_t=False``). ``scale`` is Pearson's chi2 over ``df_resid`` (statsmodels'
    ``scale="X2"``) for the Gaussian, Gamma and Tweedie families, 1 for the binomial, Poisson
    and negative binomial. ``loglike`` is the family's log-likelihood at that scale (the
    Gaussian's with the scale profiled out: ``SSR / n``; NaN for a Tweedie power outside
    ``[1, 2]``, where statsmodels defines none); ``aic = -2 loglike + 2 (df_model + 1)`` and
    ``bic`` is statsmodels 0.15's ``bic`` (= ``bic_llf``): ``-2 loglike + (df_model + 1)
    log(n)``, not the deviance-based ``bic_deviance`` older releases returned. ``df_model`` is
    the rank of ``J`` less 1 and ``df_resid`` ``n`` less the rank (statsmodels': with the
    intercept counted among the ``df_model + 1`` parameters whether or not it is fitted); ``n``
    is the rows, but for a weighted negative binomial, whose weights are frequencies
    (statsmodels' ``freq_weights``), their sum (``df_resid`` is then a float unless they add
    up to a whole number; ``n_samples`` is the rows all the same, as statsmodels' ``nobs``).
    ``null_deviance`` is the deviance of the intercept-only model: the labels' weighted mean,
    or with offsets the model fitted with them. A coefficient whose feature has no value in
    any row of positive weight has a NaN standard error (statsmodels reports 0, to rounding).
    """

    coef: np.ndarray
    names: tuple[str, ...]
    std_err: np.ndarray
    z: np.ndarray
    p_values: np.ndarray
    conf_int: np.ndarray
    deviance: float
    null_deviance: float
    pearson_chi2: float
    scale: float
    df_model: int
    df_resid: float  # an int but for a weighted negative binomial's fractional weights
    loglike: float
    aic: float
    bic: float
    n_samples: int
    penalized: bool
    family: str
    link: str
    alpha: float
    model: str  # the model's repr

    def summary(self) -> str:
        """A printable table laid out as statsmodels' GLM summary: the fit's figures, then a
        row per parameter (coef, std err, z, P>|z| and the 1 - alpha interval); a penalised
        fit ends with what its standard errors are."""
        return "\n".join(_summary_lines(self))

    def __str__(self) -> str:
        return self.summary()


_WIDTH = 78
_CELLS = (11, 11, 11, 11, 12, 12)  # statsmodels' column widths: coef, std err, z, P>|z| and the interval


def _summary_lines(found: Inference) -> list[str]:
    left = [("Model:", found.model.split("(")[0]), ("Model Family:", found.family), ("Link Function:", found.link),
            ("Covariance Type:", "nonrobust"), ("Penalised:", "yes" if found.penalized else "no"),
            ("AIC:", _figure(found.aic)), ("BIC:", _figure(found.bic)), ("", "")]
    df_resid = found.df_resid if isinstance(found.df_resid, int) else f"{found.df_resid:.2f}"
    right = [("No. Observations:", str(found.n_samples)), ("Df Residuals:", str(df_resid)),
             ("Df Model:", str(found.df_model)), ("Scale:", _figure(found.scale)),
             ("Log-Likelihood:", _figure(found.loglike)), ("Deviance:", _figure(found.deviance)),
             ("Null Deviance:", _figure(found.null_deviance)), ("Pearson chi2:", _figure(found.pearson_chi2, 3))]
    header = [f"{a}{b:>{36 - len(a)}}   {c}{d:>{39 - len(c)}}" for (a, b), (c, d) in zip(left, right)]
    table = _coefficient_lines(found)
    width = max(_WIDTH, len(table[0]))
    lines = ["Generalized Linear Model Regression Results".center(width).rstrip(), "=" * width, *header, "=" * width,
             table[0], "-" * width, *table[1:], "=" * width]
    if found.penalized:
        lines.append(f"Penalised fit ({found.model}): the standard errors are those of the unpenalised likelihood at "
                     "the penalised estimate; they do not account for the penalty's shrinkage.")
    return lines


def _coefficient_lines(found: Inference) -> list[str]:
    width = max(10, max((len(name) for name in found.names), default=0) + 1)
    low, high = found.alpha / 2.0, 1.0 - found.alpha / 2.0
    heads = ("coef", "std err", "z", "P>|z|", f"[{low:.3g}", f"{high:.3g}]")
    lines = [" " * width + "".join(f"{head:>{cell}}" for head, cell in zip(heads, _CELLS))]
    for i, name in enumerate(found.names):
        cells = (_cell(found.coef[i], 4), _cell(found.std_err[i], 3), _cell(found.z[i], 3),
                 f"{found.p_values[i]:.3f}", _cell(found.conf_int[i, 0], 3), _cell(found.conf_int[i, 1], 3))
        lines.append(f"{name:<{width}}" + "".join(f"{text:>{cell}}" for text, cell in zip(cells, _CELLS)))
    return lines


def _cell(value: float, decimals: int) -> str:
    """statsmodels' table format: fixed decimals, or 3 significant digits far from 1."""
    if value != 0 and np.isfinite(value) and not 1e-4 <= abs(value) < 1e4:
        return f"{value:.3g}"
    return f"{value:.{decimals}f}"


def _figure(value: float, digits: int = 5) -> str:
    return f"{value:#.{digits}g}"
