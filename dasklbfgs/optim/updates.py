"""First-order update rules as pure functions over explicit state (optax-style).

``rule.init(params) -> state`` and ``rule.update(grad, state) -> (delta, state)``; the
caller applies ``params += delta``. States are dicts of numpy arrays, so they pickle,
checkpoint to Zarr and move between processes unchanged. The same functions run in a
unit test and inside a Downpour parameter shard (docs/algorithms.md §3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dasklbfgs.errors import ConfigurationError

__all__ = ["UpdateRule", "sgd", "momentum", "adagrad", "make_rule", "RULES"]

State = dict[str, np.ndarray]


class UpdateRule(NamedTuple):
    """A named pair of pure functions plus the hyper-parameters that built it."""

    name: str
    hyper: dict[str, Any]
    init: Callable[[np.ndarray], State]
    update: Callable[[np.ndarray, State], tuple[np.ndarray, State]]
    #: A zero gradient is a zero step and leaves the state alone, so updating only the
    #: entries a sparse gradient carries gives exactly the dense result.
    sparse_exact: bool = False


def _check_rate(learning_rate: Any) -> float:
    try:
        rate = float(learning_rate)
    except (TypeError, ValueError):
        raise ConfigurationError(f"learning_rate must be a positive number, got {learning_rate!r}") from None
    if not (rate > 0 and math.isfinite(rate)):
        raise ConfigurationError(f"learning_rate must be a positive number, got {learning_rate!r}")
    return rate


def sgd(learning_rate: float) -> UpdateRule:
    """Plain SGD: ``delta = -lr g``."""
    lr = _check_rate(learning_rate)

    def init(params: np.ndarray) -> State:
        return {}

    def update(grad: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        return -lr * grad, state

    return UpdateRule("sgd", {"learning_rate": lr}, init, update, sparse_exact=True)


def momentum(learning_rate: float, beta: float = 0.9, nesterov: bool = False) -> UpdateRule:
    """Heavy-ball momentum: ``v = beta v + g``; ``delta = -lr v`` (Nesterov: ``-lr (g + beta v)``)."""
    lr = _check_rate(learning_rate)
    if not 0.0 <= beta < 1.0:
        raise ConfigurationError(f"beta must be in [0, 1), got {beta!r}")

    def init(params: np.ndarray) -> State:
        return {"velocity": np.zeros_like(params, dtype=np.float64)}

    def update(grad: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        velocity = beta * state["velocity"] + grad
        step = grad + beta * velocity if nesterov else velocity
        return -lr * step, {"velocity": velocity}

    return UpdateRule("momentum", {"learning_rate": lr, "beta": beta, "nesterov": nesterov}, init, update)


def adagrad(learning_rate: float, eps: float = 1e-8, initial_accumulator: float = 0.0) -> UpdateRule:
    """Adagrad (Duchi et al. 2011; DistBelief's choice at the shards, docs/algorithms.md §3).

    ``acc += g^2``; ``delta = -lr g / (sqrt(acc) + eps)``: each parameter gets its own rate,
    shrinking with the gradients it has seen.
    """
    lr = _check_rate(learning_rate)
    if not eps > 0:
        raise ConfigurationError(f"eps must be positive, got {eps!r}")

    def init(params: np.ndarray) -> State:
        return {"accumulator": np.full(np.shape(params), float(initial_accumulator))}

    def update(grad: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        # Three temporaries instead of six (this runs on every push at the shards);
        # the inputs are never modified.
        accumulator = np.multiply(grad, grad)
        accumulator += state["accumulator"]
        delta = np.sqrt(accumulator)
        delta += eps
        np.divide(grad, delta, out=delta)
        delta *= -lr
        return delta, {"accumulator": accumulator}

    return UpdateRule("adagrad", {"learning_rate": lr, "eps": eps, "initial_accumulator": initial_accumulator},
                      init, update, sparse_exact=True)


RULES: dict[str, Callable[..., UpdateRule]] = {"sgd": sgd, "momentum": momentum, "adagrad": adagrad}


def make_rule(name: str, **hyper: Any) -> UpdateRule:
    """Build rule ``name`` (``"adagrad"``, ``"sgd"`` or ``"momentum"``) from hyper-parameters."""
    if name not in RULES:
        raise ConfigurationError(f"optimizer must be one of {tuple(RULES)!r}, got {name!r}")
    try:
        return RULES[name](**hyper)
    except TypeError as exc:
        raise ConfigurationError(f"bad hyper-parameters for {name!r}: {exc}") from None
