"""Compact row sums: a sum vector that is zero outside a few coordinates, and adding sums.

A linear model's gradient sum over a block of sparse rows is zero on every coefficient of
a feature the block has no value for. At millions of hashed features a block touches a
small fraction of them, so Sandblaster's portion tasks return a :class:`SparseSum` (the
touched coordinates and their values) instead of a vector as long as the parameters.

:func:`add_sum_parts` adds compact and dense sums alike and gives the same bits as adding
their dense forms left to right from zero: each coordinate receives the same additions in
the same order, and the dense form's other additions are of ``+0.0``, which changes no
value (a sum that starts from ``+0.0`` is never ``-0.0``, the one value it would change;
every sum here starts from ``+0.0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ADD_BLOCK", "REDUCE_GROUP", "WHOLE_TOTALS_BYTES", "BlockCuts", "BlockIndex", "SparseSum", "add_sum_parts",
           "add_sums", "add_sums_dense", "as_dense", "reduce_in_blocks", "reduce_in_groups", "renumber"]

#: A compact sum costs an index (4 bytes) and a value (8) per coordinate, a dense one 8:
#: adding turns compact into dense past this fraction of the coordinates.
DENSE_ABOVE = 8 / 12


def index_dtype(size: int) -> type:
    return np.int32 if size <= np.iinfo(np.int32).max else np.int64


@dataclass(frozen=True)
class SparseSum:
    """A sum vector of length ``size``, zero outside the sorted, distinct ``index``,
    where it holds ``values``."""

    size: int
    index: np.ndarray
    values: np.ndarray

    @classmethod
    def zero(cls, size: int) -> SparseSum:
        """The sum over no rows: no coordinates at all."""
        return cls(size, np.zeros(0, dtype=index_dtype(size)), np.zeros(0))

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (what a portion task sends, give or take a header)."""
        return self.index.nbytes + self.values.nbytes

    def to_dense(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.index] += self.values  # += from +0.0, as the dense sums are formed
        return out

    def add_to(self, dense: np.ndarray) -> None:
        """``dense += self.to_dense()`` without forming it (``np.add.at``: unbuffered, so about
        3x faster than a fancy-indexed ``+=`` at millions of coordinates, which gathers, adds
        and scatters them; the same bits, each coordinate's value added once).

        ``np.add.at`` takes its fast loop only on aligned values of numpy's own dtype
        instance; values that arrived over the wire may start at any byte of a message frame,
        and unpickling gives them a dtype equal to float64 but not numpy's: either costs 7-10x
        at 200k values. So they are viewed with numpy's dtype, and copied aligned if need be."""
        values = self.values.view(np.dtype(self.values.dtype.str))
        np.add.at(dense, self.index, values if values.flags.aligned else np.require(values, requirements="A"))


def first_of_each(ordered: np.ndarray) -> np.ndarray:
    """Where each distinct value of the sorted ``ordered`` first occurs (a mask)."""
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def distinct(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of the sorted ``ordered``: ``np.unique`` without its sort, which
    for sorted runs (the parts' indices) a stable sort does ten times faster."""
    return ordered[first_of_each(ordered)]


def renumber(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(indices, return_inverse=True)``: the distinct values, sorted, and each
    entry's position among them. Three times faster on a CSR block's column indices: a
    stable argsort runs on the rows' already sorted runs (numpy's default argsort does not)."""
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    first = first_of_each(ordered)
    renumbered: np.ndarray = np.empty(len(ordered), dtype=index_dtype(len(ordered)))  # 4 bytes a non-zero, as scipy's
    renumbered[order] = np.cumsum(first, dtype=renumbered.dtype) - 1
    return ordered[first], renumbered


def as_dense(sums: np.ndarray | SparseSum) -> np.ndarray:
    """The sum vector in full, for the step that needs every coordinate."""
    return sums.to_dense() if isinstance(sums, SparseSum) else sums


def add_sum_parts(parts: list[np.ndarray | SparseSum], *, dense_result: bool = False) -> np.ndarray | SparseSum:
    """Sum vectors added left to right from zero, bitwise as their dense forms would add.

    Compact if every part is and the union of their coordinates is small (below
    :data:`DENSE_ABOVE` of the vector), else dense; always dense with ``dense_result`` (for a
    total that stays in this process: forming the union costs more than it saves there).
    """
    size = parts[0].size
    dense = [p for p in parts if not isinstance(p, SparseSum)]
    if not dense and not dense_result:
        compact = [p for p in parts if isinstance(p, SparseSum)]  # every part: none is dense
        union = distinct(np.sort(np.concatenate([p.index for p in compact]), kind="stable"))
        if len(union) <= DENSE_ABOVE * size:
            values = np.zeros(len(union))
            for sparse in compact:
                values[np.searchsorted(union, sparse.index)] += sparse.values
            return SparseSum(size, union.astype(index_dtype(size), copy=False), values)
    total = np.zeros(size, dtype=dense[0].dtype if dense else np.float64)  # the dense parts' dtype, as before
    for part in parts:
        if isinstance(part, SparseSum):
            part.add_to(total)
        else:
            total += part
    return total


REDUCE_GROUP = 8  # partial sums added per step of the reduction tree


def add_sums(*parts: tuple[float, Any]) -> tuple[float, Any]:
    """Add ``(loss, sums)`` pairs in the order given; the sums may be compact
    (:func:`add_sum_parts`: the bits of adding them dense)."""
    return _add(parts, dense_result=False)


def add_sums_dense(*parts: tuple[float, Any]) -> tuple[float, np.ndarray]:
    """:func:`add_sums` with the sums always dense (the same bits): for a reduction whose
    total stays in the process that adds, where a compact union would cost more than it saves."""
    return _add(parts, dense_result=True)


def _add(parts: tuple[tuple[float, Any], ...], dense_result: bool) -> tuple[float, Any]:
    loss = 0.0
    for part_loss, _ in parts:
        loss += part_loss
    return loss, add_sum_parts([part_sums for _, part_sums in parts], dense_result=dense_result)


def reduce_in_groups(parts: list[Any], add: Any) -> Any:
    """Add ``parts`` in a tree of groups of :data:`REDUCE_GROUP`, in portion order.

    The client (``add=add_sums``) and a reduction on the workers (``add`` submitting
    :func:`add_sums` tasks) associate the additions identically, so both give the same bits.
    """
    parts = list(parts)
    while len(parts) > 1:
        parts = [add(*parts[i : i + REDUCE_GROUP]) for i in range(0, len(parts), REDUCE_GROUP)]
    return parts[0]


#: Coordinates :func:`reduce_in_blocks` adds at a time: a few dense arrays of a block (the
#: group totals, 1 MiB each) stay in a core's cache.
ADD_BLOCK = 1 << 17
#: Whole-length totals up to this many bytes in all are added whole: they stay in the cache
#: (half of a 32 MiB L3) and blocks would only add calls, as for ctr at 200k rows (8 portions'
#: sums over 492,836 parameters: one 3.9 MB total); ctr at 1e6 rows forms four of 11 MB.
WHOLE_TOTALS_BYTES = 16 * 2**20


def block_edges(size: int) -> np.ndarray:
    """Where the blocks of :data:`ADD_BLOCK` coordinates of a vector of ``size`` begin, and its end."""
    return np.r_[np.arange(0, size, ADD_BLOCK), size]


@dataclass(frozen=True)
class BlockIndex:
    """A sorted, distinct index cut at the blocks' edges (:func:`block_edges`): per block, the
    slice of the index in it and that slice counted from the block's first coordinate."""

    index: np.ndarray
    size: int  # of the vector the index is into
    slices: list[slice]
    local: list[np.ndarray]

    @classmethod
    def of(cls, index: np.ndarray, size: int) -> BlockIndex:
        if index.size > 1 and not np.all(index[1:] > index[:-1]):
            raise ValueError("a compact sum's index must be sorted and distinct to be cut at blocks")
        edges = block_edges(size)
        bounds = np.searchsorted(index, edges)
        slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        return cls(index, size, slices, [index[cut] - start for cut, start in zip(slices, edges[:-1])])


class BlockCuts:
    """Indices the sums come back on at every evaluation (an evaluator's positions), each cut
    at the blocks the first time sums on it are added by blocks, and kept; any other index is
    cut when it is met and not kept (the arrays are held, so their ``id`` cannot be reused)."""

    def __init__(self, indices: list[np.ndarray]) -> None:
        self._kept = {id(index): index for index in indices}
        self._cuts: dict[int, BlockIndex] = {}

    def cut(self, index: np.ndarray, size: int) -> BlockIndex:
        """``index`` cut at the blocks of a vector of ``size``."""
        if self._kept.get(id(index)) is not index:
            return BlockIndex.of(index, size)
        cut = self._cuts.get(id(index))
        if cut is None or cut.size != size:
            cut = self._cuts[id(index)] = BlockIndex.of(index, size)
        return cut


def reduce_in_blocks(parts: list[tuple[float, Any]], known: BlockCuts | None = None) -> tuple[float, np.ndarray]:
    """``reduce_in_groups(parts, add_sums_dense)``, dense, taken :data:`ADD_BLOCK` coordinates
    at a time: each block's sums go through the same tree of groups, so every coordinate
    receives the same additions in the same order (the same bits, the loss the same sum).

    Adding a million-wide evaluation's 20 compact sums whole scatters each into group totals
    as long as the parameters (11 MB each, more than stays in cache beside the sums being
    read); a block's totals stay in cache. ``known``: the indices that come back at every
    evaluation, cut once (:class:`BlockCuts`); any other compact sum is cut here."""
    size = parts[0][1].size  # (a SparseSum's, or a dense sum's)
    edges = block_edges(size)
    totals = -(-len(parts) // REDUCE_GROUP) + (len(parts) > REDUCE_GROUP)  # the groups', and theirs
    if len(edges) <= 2 or 8 * size * totals <= WHOLE_TOTALS_BYTES:  # whole: in the cache either way
        loss, sums = reduce_in_groups(parts, add_sums_dense)
        return loss, as_dense(sums)
    known = known or BlockCuts([])
    cuts = [None if not isinstance(sums, SparseSum) else known.cut(sums.index, size) for _, sums in parts]
    total: np.ndarray | None = None
    loss = 0.0
    for block, (start, stop) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist())):
        pieces = [(part_loss, sums[start:stop] if cut is None else
                   SparseSum(stop - start, cut.local[block], sums.values[cut.slices[block]]))
                  for (part_loss, sums), cut in zip(parts, cuts)]
        loss, block_sums = reduce_in_groups(pieces, add_sums_dense)
        dense = as_dense(block_sums)
        if total is None:  # (the dtype the tree gives: the dense parts')
            total = np.empty(size, dtype=dense.dtype)
        total[start:stop] = dense
    assert total is not None, "two blocks at least"
    return loss, total
