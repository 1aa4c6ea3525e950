"""Model selection on the cluster: many fits of one model on one set of cached shards
(regularization paths, cross-validation on row masks; early stopping to come).

The names below are imported on first use (:mod:`dasklbfgs._lazy`): the command line's help
reads :class:`~dasklbfgs.selection.options.PathOptions` without loading Dask.
"""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports

if TYPE_CHECKING:
    from dasklbfgs.selection.cv import CrossValidatedPath, cross_validated_path
    from dasklbfgs.selection.options import PathOptions
    from dasklbfgs.selection.path import RegularizationPath, regularization_path, with_penalty

__all__ = ["CrossValidatedPath", "PathOptions", "RegularizationPath", "cross_validated_path", "regularization_path",
           "with_penalty"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "CrossValidatedPath": "dasklbfgs.selection.cv", "cross_validated_path": "dasklbfgs.selection.cv",
    "PathOptions": "dasklbfgs.selection.options",
    "RegularizationPath": "dasklbfgs.selection.path", "regularization_path": "dasklbfgs.selection.path",
    "with_penalty": "dasklbfgs.selection.path",
})
