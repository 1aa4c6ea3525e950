"""A penalty chosen along a regularization path, on held-out rows or by cross-validation,
with the report of every fit and the arrays saved beside the chosen model: what the
``dasklbfgs path`` command and a pipeline's ``path:`` section run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.models.linear import LinearModel
from dasklbfgs.scoring import evaluate
from dasklbfgs.selection.cv import CrossValidatedPath, cross_validate
from dasklbfgs.selection.path import PathPlan, RegularizationPath, with_penalty

__all__ = ["ChosenFit", "choose_penalty"]

#: the arrays of a path saved beside the chosen model (``path_<name>`` in its file)
PATH_ARRAYS = ("alphas", "l1", "l2", "coefs", "objective", "nit", "n_nonzero", "optimality")


@dataclass
class ChosenFit:
    """The model at the chosen penalty and its parameters, the report of the path (one entry
    per penalty in ``report["fits"]``, the chosen one's index in ``report["chosen"]``), the
    path's arrays to save beside the model, and whether every fit converged."""

    model: LinearModel
    params: np.ndarray
    report: dict[str, Any]
    arrays: dict[str, np.ndarray]
    success: bool


def choose_penalty(plan: PathPlan, data: Any, *, test: Any = None, cv: int | None = None,
                   client: Any = None, callback: Any = None) -> ChosenFit:
    """Run ``plan`` on ``data`` and choose a penalty: with ``cv``, by ``cv``-fold
    cross-validation on ``data`` (the choice refitted on every row, then scored on ``test``
    if given); else the best held-out loss on ``test``, or with no ``test`` the last fit.
    ``callback`` goes to every fit of a path (not cross-validation): one it stops ends the
    path, and the choice is among the fits reached (``report["stopped"]`` says why)."""
    model = plan.model
    if cv is None:  # a fit the callback stops ends the path: the choice among the fits reached
        path = plan.run(data, eval_data=test, client=client, callback=callback)
        chosen = path.best() if path.scores else len(path) - 1
        report = _report(path, chosen, model, data.url, test)
        arrays = {"path_" + key: np.asarray(getattr(path, key)) for key in PATH_ARRAYS if key != "coefs"}
        arrays |= _coefs_arrays(path.coefs)
        l1, l2, params = float(path.l1[chosen]), float(path.l2[chosen]), path.coef(chosen)
        success = bool(np.all(path.success))
        report["stopped"] = path.stats["stopped"]
    else:
        found = cross_validate(plan, data, cv=cv, stratified=None, metric=None, client=client)
        report = _cv_report(found, model, data.url)
        arrays = {"path_alphas": found.alphas, "path_l1": found.l1, "path_l2": found.l2,
                  **{f"path_cv_{name}": values for name, values in found.scores.items()}}
        l1, l2, params = float(found.l1[found.best_index]), float(found.l2[found.best_index]), found.coef
        success = bool(found.refit.success and all(np.all(p.success) for p in found.folds))
        if test is not None:
            report["test"] = evaluate(with_penalty(model, l1=l1, l2=l2), params, test, client=client)
    return ChosenFit(with_penalty(model, l1=l1, l2=l2), params, report, arrays, success)


def _coefs_arrays(coefs: Any) -> dict[str, np.ndarray]:
    """A path's parameters as saved beside the chosen model: ``path_coefs`` (dense), or a wide
    path's CSR rows as ``path_coefs_data``, ``_indices``, ``_indptr`` and ``_shape``
    (``scipy.sparse.csr_array((data, indices, indptr), shape=shape)`` reads them back)."""
    if not hasattr(coefs, "indptr"):
        return {"path_coefs": np.asarray(coefs)}
    return {"path_coefs_data": coefs.data, "path_coefs_indices": coefs.indices, "path_coefs_indptr": coefs.indptr,
            "path_coefs_shape": np.asarray(coefs.shape)}


def _report(path: RegularizationPath, chosen: int, model: LinearModel, data: str, test: Any) -> dict[str, Any]:
    metric, scores = path.selected_by, path.scores or []
    return {
        "model": repr(model), "dataset": data, "test": None if test is None else test.url,
        "penalty": path.penalty, "alpha_max": path.alpha_max, "seconds": path.stats["seconds"],
        "chosen": chosen, "chosen_by": metric,
        "fits": [{"alpha": float(path.alphas[i]), "l1": float(path.l1[i]), "l2": float(path.l2[i]),
                  "n_nonzero": int(path.n_nonzero[i]), "iterations": int(path.nit[i]),
                  "objective": float(path.objective[i]), "success": bool(path.success[i]),
                  **({"held_out": scores[i][metric]} if metric else {})} for i in range(len(path))],
    }


def _cv_report(found: CrossValidatedPath, model: LinearModel, data: str) -> dict[str, Any]:
    """The report of a cross-validated path: per penalty, the folds' means (non-zero
    coefficients, training objective, the held-out metric chosen by) and their iterations."""
    folds, name = found.folds, found.selected_by
    return {
        "model": repr(model), "dataset": data, "test": None, "penalty": folds[0].penalty,
        "alpha_max": found.alpha_max, "seconds": found.stats["seconds"], "cv": len(folds),
        "chosen": found.best_index, "chosen_by": f"{name}, the mean over {len(folds)} folds",
        "fits": [{"alpha": float(found.alphas[i]), "l1": float(found.l1[i]), "l2": float(found.l2[i]),
                  "n_nonzero": float(np.mean([p.n_nonzero[i] for p in folds])),
                  "iterations": int(sum(p.nit[i] for p in folds)),
                  "objective": float(np.mean([p.objective[i] for p in folds])),
                  "success": bool(all(p.success[i] for p in folds)),
                  "held_out": float(found.mean_scores[name][i])} for i in range(len(found.alphas))],
        "refit": {"iterations": int(found.refit.nit), "objective": float(found.refit.fun)},
    }
