"""Model selection on the cluster: many fits of one model on one set of cached shards
(regularization paths; cross-validation and early stopping to come)."""

from dasklbfgs.selection.path import RegularizationPath, regularization_path, with_penalty

__all__ = ["RegularizationPath", "regularization_path", "with_penalty"]
