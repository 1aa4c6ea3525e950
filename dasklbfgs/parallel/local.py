"""The locally connected autoencoder partitioned into horizontal bands.

Partition p owns the hidden-grid rows ``a_p:a_{p+1}`` (every column and map of them: its
``W1``, ``b1``, ``W2`` blocks) and the pixel rows ``stride*a_p:stride*a_{p+1}`` (the last one to
the bottom: its ``b2`` block and those pixels' loss). The encoder reads the pixel rows its
windows cover straight from the rows of X (input data: no exchange). The decoder's windows of
its last hidden rows reach ``window - stride`` pixel rows into the next band: those partial
pre-activation sums go to their owner (a halo), which adds what it receives in partition
order; backward, the output error of those pixel rows comes back from their owner. So the
bytes moved follow the boundary (``(window - stride) * side`` values a row of data, each way,
per boundary), not the hidden layer.
"""

from __future__ import annotations

import numpy as np

from dasklbfgs.errors import PartitionError
from dasklbfgs.models.local_autoencoder import LocalAutoencoder
from dasklbfgs.parallel.base import PartitionedModel, Shapes, even_bounds
from dasklbfgs.parallel.exchanges import Step, all_sum, halo

__all__ = ["PartitionedLocalAutoencoder"]


class PartitionedLocalAutoencoder(PartitionedModel):
    """:class:`~dasklbfgs.models.local_autoencoder.LocalAutoencoder` over ``k`` bands of
    hidden-grid rows (``rows``) and of pixel rows (``pixel_rows``)."""

    model: LocalAutoencoder

    def __init__(self, model: LocalAutoencoder, k: int) -> None:
        if k > model.grid:
            raise PartitionError(
                f"cannot split the hidden grid of {model!r} into k={k} bands of rows: the grid has {model.grid} "
                f"rows ({model.grid} x {model.grid} locations of {model.maps} maps); use k <= {model.grid}"
            )
        self.rows = even_bounds(model.grid, k)
        self.pixel_rows = (*(model.stride * a for a in self.rows[:-1]), model.side)
        super().__init__(model, k)

    def cover(self, p: int) -> tuple[int, int]:
        """Pixel rows partition p's windows read and reconstruct."""
        return self.model.cover(self.rows[p], self.rows[p + 1])

    def spill(self, p: int) -> dict[int, tuple[int, int]]:
        """Pixel rows of other partitions that partition p's windows reach, by owner."""
        low, high = self.cover(p)
        spans = {q: (max(low, self.pixel_rows[q]), min(high, self.pixel_rows[q + 1])) for q in range(self.k) if q != p}
        return {q: span for q, span in spans.items() if span[0] < span[1]}

    def spilled_into(self, p: int) -> tuple[int, ...]:
        """Partitions whose windows reach partition p's pixel rows."""
        return tuple(q for q in range(self.k) if p in self.spill(q))

    def own_shapes(self, p: int) -> Shapes:
        """Partition p's band of W1, b1 and W2 (hidden-grid rows) and of b2 (pixel rows)."""
        model, band = self.model, self.rows[p + 1] - self.rows[p]
        g, size, m = model.grid, model.window * model.window, model.maps
        return {"W1": (band, g, size, m), "b1": (band, g, m), "W2": (band, g, m, size),
                "b2": (self.pixel_rows[p + 1] - self.pixel_rows[p], model.side)}

    def block_indices(self, p: int, positions: dict[str, np.ndarray]) -> list[np.ndarray]:
        pixels = positions["b2"].reshape(self.model.side, self.model.side)
        return [*(positions[name][self.rows[p] : self.rows[p + 1]] for name in ("W1", "b1", "W2")),
                pixels[self.pixel_rows[p] : self.pixel_rows[p + 1]]]

    def program(self, p: int, params_p: np.ndarray, X: np.ndarray, y: np.ndarray,
                w: np.ndarray | None = None) -> Step[tuple[float, np.ndarray]]:
        model = self.model
        images = np.asarray(X, dtype=np.float64).reshape(-1, model.side, model.side)
        w = None if w is None else np.asarray(w, dtype=np.float64)
        own = self.own_arrays(p, params_p)
        (low, high), (first, last) = self.cover(p), self.pixel_rows[p : p + 2]
        spill_out = self.spill(p)  # pixel rows of others that my windows reach
        spill_in = {q: self.spill(q)[p] for q in self.spilled_into(p)}  # my pixel rows others' windows reach
        windows, a = model.encode(own["W1"], own["b1"], images[:, low:high])
        contributions = model.decode(a, own["W2"])  # pixel rows low:high
        received = yield from halo("decoder", {q: contributions[:, s - low : e - low] for q, (s, e) in
                                               spill_out.items()}, tuple(spill_in))
        pre = np.zeros((len(images), last - first, model.side))
        for q in range(self.k):  # partition order: a fixed order of additions
            if q == p:
                end = min(high, last)
                pre[:, : end - first] += contributions[:, : end - low]
            elif q in spill_in:
                s, e = spill_in[q]
                pre[:, s - first : e - first] += received[q]
        pre += own["b2"]
        loss, error = model.output_error(pre, images[:, first:last], w)
        returned = yield from halo("decoder-error", {q: error[:, s - first : e - first] for q, (s, e) in
                                                     spill_in.items()}, tuple(spill_out))
        cover_error = np.empty_like(contributions)
        cover_error[:, : min(high, last) - low] = error[:, : min(high, last) - first]
        for q, (s, e) in spill_out.items():
            cover_error[:, s - low : e - low] = returned[q]
        grad = np.zeros(len(params_p))
        grads = self.own_arrays(p, grad)
        grads["b2"] += error.sum(axis=0)
        model.backward(windows, a, own["W2"], cover_error, grads)
        return (yield from all_sum("loss", p, self.k, loss)), grad
