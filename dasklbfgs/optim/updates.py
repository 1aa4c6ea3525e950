"""First-order update rules as pure functions over explicit state (optax-style).

``rule.init(params) -> state`` and ``rule.update(grad, state) -> (delta, state)``; the
caller applies ``params += delta``. Rules that can also have ``rule.apply(grad, state,
params)``: the same step in place, block by block (a block's arithmetic stays in cache, the
parameters and state are read and written once, and nothing as long as the parameters is
allocated: what a parameter shard does on every push), with the same bits as ``update``.
States are dicts of numpy arrays, so they pickle,
checkpoint to Zarr and move between processes unchanged. The same functions run in a
unit test and inside a Downpour parameter shard (docs/algorithms.md §3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.vectors import BLOCK

__all__ = ["UpdateRule", "sgd", "momentum", "adagrad", "ftrl", "ftrl_weights", "ftrl_step", "make_rule", "RULES"]

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
    #: ``apply(grad, state, params)``: ``update`` and ``params += delta`` in place, blockwise
    #: (``grad`` float64, or float32 converted block by block).
    apply: Callable[[np.ndarray, State, np.ndarray], None] | None = None




def _blocks(size: int) -> list[slice]:
    return [slice(start, min(start + BLOCK, size)) for start in range(0, size, BLOCK)]


def _apply_blockwise(grad: np.ndarray, params: np.ndarray,
                     step_into: Callable[[slice, np.ndarray, np.ndarray], None]) -> None:
    """``params += step`` block by block, ``step_into(block, g, step)`` writing the step of
    each block (``g``: its float64 gradient) into one block-sized scratch buffer."""
    scratch = np.empty(min(BLOCK, len(params)))
    for b, g in _gradient_blocks(grad):
        step = scratch[: b.stop - b.start]
        step_into(b, g, step)
        params[b] += step


def _gradient_blocks(grad: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """Each block's slice and the gradient there as float64: a float32 gradient (as it comes
    off the wire) is converted one block at a time into one block-sized buffer, never copied
    whole (the conversion is exact, so the step's bits are those of a float64 gradient)."""
    buffer = None if grad.dtype == np.float64 else np.empty(min(BLOCK, len(grad)))
    for b in _blocks(len(grad)):
        if buffer is None:
            yield b, grad[b]
        else:
            g = buffer[: b.stop - b.start]
            np.copyto(g, grad[b])
            yield b, g


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

    def apply(grad: np.ndarray, state: State, params: np.ndarray) -> None:
        _apply_blockwise(grad, params, lambda b, g, step: np.multiply(g, -lr, out=step))

    return UpdateRule("sgd", {"learning_rate": lr}, init, update, sparse_exact=True, apply=apply)


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

    def step_into(b: slice, g: np.ndarray, step: np.ndarray, state: State) -> None:
        velocity = state["velocity"][b]
        velocity *= beta
        velocity += g
        if nesterov:
            np.multiply(velocity, beta, out=step)
            step += g
            step *= -lr
        else:
            np.multiply(velocity, -lr, out=step)

    def apply(grad: np.ndarray, state: State, params: np.ndarray) -> None:
        _apply_blockwise(grad, params, lambda b, g, step: step_into(b, g, step, state))

    return UpdateRule("momentum", {"learning_rate": lr, "beta": beta, "nesterov": nesterov}, init, update,
                      apply=apply)


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

    def step_into(b: slice, g: np.ndarray, step: np.ndarray, state: State) -> None:
        accumulator = state["accumulator"][b]
        np.multiply(g, g, out=step)
        accumulator += step
        np.sqrt(accumulator, out=step)
        step += eps
        np.divide(g, step, out=step)
        step *= -lr

    def apply(grad: np.ndarray, state: State, params: np.ndarray) -> None:
        _apply_blockwise(grad, params, lambda b, g, step: step_into(b, g, step, state))

    return UpdateRule("adagrad", {"learning_rate": lr, "eps": eps, "initial_accumulator": initial_accumulator},
                      init, update, sparse_exact=True, apply=apply)


def _check_penalty(value: Any, name: str) -> float | np.ndarray:
    """A non-negative finite number, or an array of them (one per coordinate)."""
    try:
        penalty = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a non-negative number or array of them, got {value!r}") from None
    if not (np.all(penalty >= 0) and np.all(np.isfinite(penalty))):
        raise ConfigurationError(f"{name} must be a non-negative number or array of them, got {value!r}")
    return float(penalty) if penalty.ndim == 0 else penalty


def ftrl_weights(state: State, *, learning_rate: float, beta: float, l1: Any, l2: float) -> np.ndarray:
    """FTRL-Proximal's closed-form parameters from its state ``z, n`` (McMahan et al. 2013,
    Algorithm 1): ``0`` where ``|z| <= l1``, else ``-(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)``."""
    z, n = state["z"], state["n"]
    shrunk = np.sign(z) * np.maximum(np.abs(z) - l1, 0.0)  # exactly 0 where |z| <= l1
    return -shrunk / ((beta + np.sqrt(n)) / learning_rate + l2)


def ftrl_step(grad: np.ndarray, state: State, played: np.ndarray, *, learning_rate: float, beta: float,
              l1: Any, l2: float) -> tuple[np.ndarray, State]:
    """One FTRL-Proximal round: the gradient ``grad`` was taken at ``played``; the new
    parameters (thresholded with ``l1``) and state.

    ``sigma = (sqrt(n + g^2) - sqrt(n)) / alpha``; ``z += g - sigma played``; ``n += g^2``.
    Where ``g == 0``, ``sigma == 0`` and the state is unchanged.
    """
    n = state["n"] + grad * grad
    sigma = (np.sqrt(n) - np.sqrt(state["n"])) / learning_rate
    new_state = {"z": state["z"] + grad - sigma * played, "n": n}
    return ftrl_weights(new_state, learning_rate=learning_rate, beta=beta, l1=l1, l2=l2), new_state


def ftrl(learning_rate: float, beta: float = 1.0, l1: Any = 0.0, l2: float = 0.0) -> UpdateRule:
    """FTRL-Proximal (McMahan et al., KDD 2013, Algorithm 1; docs/algorithms.md §9).

    Per coordinate, state ``z`` and ``n`` (the sum of squared gradients); the parameters are
    a closed form of the state (:func:`ftrl_weights`), exactly 0 where ``|z| <= l1``.
    ``learning_rate`` is the paper's alpha; ``l1`` a number or one per coordinate (0 spares
    a coordinate, e.g. an intercept); ``l2`` the paper's lambda_2. ``init(params)`` sets
    ``z`` so that the closed form gives ``params`` back (a warm start); ``update`` returns
    the change of the closed form, so ``params += delta`` tracks it.
    """
    alpha = _check_rate(learning_rate)
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ConfigurationError(f"beta must be a positive number, got {beta!r}") from None
    if not (beta > 0 and math.isfinite(beta)):  # beta = 0 divides by zero before the first gradient
        raise ConfigurationError(f"beta must be a positive number, got {beta!r}")
    l1, l2_checked = _check_penalty(l1, "l1"), _check_penalty(l2, "l2")
    if np.ndim(l2_checked):
        raise ConfigurationError(f"l2 must be a non-negative number, got an array of shape {np.shape(l2)}")
    l2 = float(l2_checked)
    hyper = {"learning_rate": alpha, "beta": beta, "l1": l1, "l2": l2}

    def init(params: np.ndarray) -> State:
        params = np.asarray(params, dtype=np.float64)
        # The inverse of ftrl_weights at n = 0: -z = params (beta/alpha + l2) + sign(params) l1.
        return {"z": -(params * (beta / alpha + l2) + np.sign(params) * l1), "n": np.zeros_like(params)}

    def update(grad: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        old = ftrl_weights(state, **hyper)
        new, state = ftrl_step(grad, state, old, **hyper)
        return new - old, state

    return UpdateRule("ftrl", hyper, init, update, sparse_exact=True)


RULES: dict[str, Callable[..., UpdateRule]] = {"sgd": sgd, "momentum": momentum, "adagrad": adagrad, "ftrl": ftrl}


def make_rule(name: str, **hyper: Any) -> UpdateRule:
    """Build rule ``name`` (``"adagrad"``, ``"sgd"``, ``"momentum"`` or ``"ftrl"``) from hyper-parameters."""
    if name not in RULES:
        raise ConfigurationError(f"optimizer must be one of {tuple(RULES)!r}, got {name!r}")
    try:
        return RULES[name](**hyper)
    except TypeError as exc:
        raise ConfigurationError(f"bad hyper-parameters for {name!r}: {exc}") from None
