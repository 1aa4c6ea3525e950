"""Worker-side functions: the same bits whatever the alignment of the arrays they get."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs._wire import aligned
from dasklbfgs.data.rows import Rows, aligned_rows
from dasklbfgs.models import MLP, Softmax
from dasklbfgs.solvers.sandblaster.tasks import portion_loss_grad


def misaligned_copy(a: np.ndarray, offset: int = 3) -> np.ndarray:
    """A copy of ``a`` starting ``offset`` bytes into a buffer, as a frame received over
    the wire can be: numpy flags it as not aligned."""
    buffer = np.empty(a.nbytes + 64, dtype=np.uint8)
    start = (-buffer.ctypes.data) % 64 + offset
    out = buffer[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("model", [Softmax(8, 3, l2=1e-3), MLP(8, (16,), 3, l2=1e-4)], ids=["softmax", "mlp"])
def test_a_portion_of_a_misaligned_shard_copy_gives_the_same_bits(model) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 8)) * np.logspace(0, 2, 8)
    y = rng.integers(0, 3, size=1000).astype(np.float64)
    w = rng.random(1000)
    x = rng.normal(size=model.n_params) * 3
    shard, copy = Rows(X, y, w), Rows(misaligned_copy(X), misaligned_copy(y), misaligned_copy(w))
    assert not any(a.flags.aligned for a in copy[:3])
    local = slice(500, 1000)
    loss, grad = portion_loss_grad(shard, local, model=model, x=x)
    copy_loss, copy_grad = portion_loss_grad(copy, local, model=model, x=misaligned_copy(x))
    assert copy_loss == loss
    np.testing.assert_array_equal(copy_grad, grad)


def test_aligned_copies_only_what_is_misaligned() -> None:
    a = np.arange(10.0)
    assert aligned(a) is a
    b = misaligned_copy(a)
    fixed = aligned(b)
    assert fixed.flags.aligned and fixed is not b
    np.testing.assert_array_equal(fixed, a)
    X, y, w, offset = aligned_rows(Rows(misaligned_copy(np.ones((4, 2))), a, misaligned_copy(a), misaligned_copy(a)))
    assert X.flags.aligned and y is a and w.flags.aligned and offset.flags.aligned
    assert aligned_rows(Rows(X, y)).w is None  # unweighted


def test_polling_for_portions_leaves_nothing_for_the_garbage_collector(client) -> None:
    """An evaluation polls for its portions; a poll that times out must not keep the
    caller's frames (trial points, gradients, sums) alive in a reference cycle until the
    cyclic collector runs: at 2^22 parameters that was ~170 MB an iteration."""
    import gc
    import time
    import weakref

    from dasklbfgs.solvers.sandblaster.collection import wait_polling

    class Held:  # stands for an array in the caller's frame (arrays take no weak references)
        pass

    slow = client.submit(time.sleep, 0.5, pure=False)

    def poll_once() -> weakref.ref:
        held = Held()
        done, pending = wait_polling({slow}, 0.01, "FIRST_COMPLETED")
        assert not done and pending == {slow}
        return weakref.ref(held)

    gc.disable()
    try:
        ref = poll_once()
        assert ref() is None  # freed on return, by reference counting alone
    finally:
        gc.enable()
    done, pending = wait_polling({slow}, 5.0, "ALL_COMPLETED")
    assert done == {slow} and not pending
