"""torch for the tests that train a TorchModel: skipped, with the reason, where it is not
installed; required in CI (``.ci/run`` installs its CPU build), where a missing torch fails."""

from __future__ import annotations

import os

import pytest

try:
    import torch
except ImportError:
    torch = None

#: whether the torch tests run: torch is here, or this is CI (which must have it)
TORCH_TESTS = torch is not None or bool(os.environ.get("CI"))
needs_torch = pytest.mark.skipif(not TORCH_TESTS, reason="torch is not installed (pip install 'dasklbfgs[torch]')")


def torch_classifier(n_features: int, n_classes: int, **options):
    """A small torch MLP classifier as a TorchModel (its factory a lambda: pickled by value)."""
    from torch import nn

    from dasklbfgs.models import TorchModel

    return TorchModel(lambda: nn.Sequential(nn.Linear(n_features, 6), nn.Tanh(), nn.Linear(6, n_classes)), **options)
