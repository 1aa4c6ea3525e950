"""The MLP partitioned by units: partition p owns a contiguous block of every layer's units
(hidden units and output classes), i.e. the column block ``own_l`` of every ``W_l`` and
``b_l``.

Forward: layer 0 from X (every partition has the rows); then, per layer, an all-gather of the
activations (each partition sends only its own block). The softmax is split too, without
gathering logits: per row, each partition sends its block's max ``m_p``, ``s_p = sum exp(z -
m_p)`` and the label's logit if it owns the label (``-inf`` otherwise), n x 3 numbers; every
partition combines them in partition order into the same log-sum-exp and loss, and forms its
own block of ``softmax - onehot``. Backward, per layer: partition p's share of the error of
the layer below is ``delta_p @ W_l[:, own]^T`` (n x width below); a reduce-scatter hands every
partition the sum for the units it owns.
"""

from __future__ import annotations

import numpy as np

from dasklbfgs.errors import PartitionError
from dasklbfgs.models._kernels import _dot, _sum
from dasklbfgs.models._layers import ACTIVATIONS, affine
from dasklbfgs.models.mlp import MLP
from dasklbfgs.parallel.base import PartitionedModel, Shapes, even_bounds
from dasklbfgs.parallel.exchanges import Step, all_gather, reduce_scatter

__all__ = ["PartitionedMLP"]


def _layer_name(model: MLP, l: int) -> str:
    if l == model.n_layers - 1:
        return f"the output layer ({model.n_classes} classes)"
    return f"hidden layer {l} (width {model.hidden[l]})"


class PartitionedMLP(PartitionedModel):
    """:class:`~dasklbfgs.models.mlp.MLP` over ``k`` partitions; ``bounds[l]`` are the unit
    blocks of layer l's outputs."""

    model: MLP

    def __init__(self, model: MLP, k: int) -> None:
        for l, width in enumerate(model.widths[1:]):
            if k > width:
                raise PartitionError(f"cannot split {_layer_name(model, l)} of {model!r} into k={k} partitions: "
                                     f"every partition owns at least one unit; use k <= {min(model.widths[1:])}")
        self.bounds = [even_bounds(width, k) for width in model.widths[1:]]
        super().__init__(model, k)

    def own_shapes(self, p: int) -> Shapes:
        """Every layer's ``W_l[:, own]`` and ``b_l[own]``, layer by layer."""
        shapes: Shapes = {}
        for l, (fan_in, b) in enumerate(zip(self.model.widths[:-1], self.bounds)):
            shapes[f"W{l}"], shapes[f"b{l}"] = (fan_in, b[p + 1] - b[p]), (b[p + 1] - b[p],)
        return shapes

    def block_indices(self, p: int, positions: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [positions[f"{name}{l}"][..., b[p] : b[p + 1]] for l, b in enumerate(self.bounds) for name in ("W", "b")]

    def _own_layers(self, p: int, vector: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Views of partition p's (W_l[:, own], b_l[own]) in its vector (parameters or gradient)."""
        own = self.own_arrays(p, vector)
        return [(own[f"W{l}"], own[f"b{l}"]) for l in range(self.model.n_layers)]

    def program(self, p: int, params_p: np.ndarray, X: np.ndarray, y: np.ndarray,
                w: np.ndarray | None = None) -> Step[tuple[float, np.ndarray]]:
        model, k = self.model, self.k
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        X = X.astype(dtype, copy=False)
        layers = [(W.astype(dtype, copy=False), b.astype(dtype, copy=False))
                  for W, b in self._own_layers(p, params_p)]
        act, act_grad = ACTIVATIONS[model.activation]
        inputs, own_outputs = [X], []  # inputs[l]: all of layer l's input; own_outputs: this block's
        for l, (W, b) in enumerate(layers[:-1]):
            own_outputs.append(act(affine(inputs[-1], W, b)))
            inputs.append((yield from all_gather(f"fwd/{l + 1}", p, k, own_outputs[-1], axis=1)))
        logits = affine(inputs[-1], *layers[-1])
        loss, delta = yield from self._softmax(p, logits, y, w)
        grad = np.zeros(len(params_p))
        grads = self._own_layers(p, grad)
        for l in range(model.n_layers - 1, -1, -1):
            grads[l][0][...] += inputs[l].T @ delta
            grads[l][1][...] += delta.sum(axis=0, dtype=np.float64)
            if l:
                delta = yield from reduce_scatter(f"bwd/{l}", p, self.bounds[l - 1], delta @ layers[l][0].T)
                delta *= act_grad(own_outputs[l - 1])
        return loss, grad

    def _softmax(self, p: int, logits: np.ndarray, y: np.ndarray, w: np.ndarray | None
                 ) -> Step[tuple[float, np.ndarray]]:
        """Loss sum (the same bits on every partition) and this block of d loss / d logits."""
        lo, hi = self.bounds[-1][p], self.bounds[-1][p + 1]
        rows = np.arange(logits.shape[0])
        labels = y.astype(np.intp, copy=False)
        owned = (labels >= lo) & (labels < hi)
        m = logits.max(axis=1)
        s = np.exp(logits - m[:, None]).sum(axis=1)
        label_logit = np.full(len(rows), -np.inf, dtype=logits.dtype)
        label_logit[owned] = logits[rows[owned], labels[owned] - lo]
        stats = yield from all_gather("softmax", p, self.k, np.stack([m, s, label_logit])[None], axis=0)
        top = stats[:, 0].max(axis=0)
        total = np.zeros_like(top)
        for q in range(self.k):  # partition order: the same bits everywhere
            total += stats[q, 1] * np.exp(stats[q, 0] - top)
        lse = top + np.log(total)
        per_row = lse - stats[:, 2].max(axis=0)
        loss = _sum(per_row) if w is None else _dot(w, per_row)
        delta = np.exp(logits - lse[:, None])
        delta[rows[owned], labels[owned] - lo] -= 1.0
        if w is not None:
            delta *= w[:, None].astype(delta.dtype, copy=False)
        return loss, delta
