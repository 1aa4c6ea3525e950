"""``EmbeddingLM``: a neural language model with a word-embedding table (paper §5).

Each row of X holds the ids of the ``context`` previous words; y is the next word's id.
The model looks the context words up in the embedding table ``E`` (vocab_size x
embed_dim), concatenates them, applies one tanh hidden layer and a softmax over the
vocabulary:

    f(theta) = (1/n) sum_i -log softmax(tanh(e_i W1 + b1) W2 + b2)_{y_i}
               + (l2 / 2)(||W1||^2 + ||W2||^2)

The table comes first in the flat vector, one row per word, so that a batch's gradient is
non-zero only in the rows of the words it contains (:meth:`EmbeddingLM.touched_rows`) plus
the dense layers after it. Downpour uses that to push and fetch only those rows
(:attr:`EmbeddingLM.row_table`). The penalty leaves the table out on purpose: a weight
decay on every row would make every gradient dense and undo the saving.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import schema
from dasklbfgs.models._kernels import softmax_link
from dasklbfgs.models._layers import Layout, affine, init_weights, seeded_zeros, weight_decay
from dasklbfgs.models.base import Model, SoftmaxOutput, check_l2

__all__ = ["EmbeddingLM", "RowTable"]

_BLOCK_ROWS = 512


class RowTable(NamedTuple):
    """Rows ``[offset + r * width, offset + (r + 1) * width)``, r < n_rows, of the flat vector
    whose gradient is non-zero only for the rows a batch touches."""

    offset: int
    n_rows: int
    width: int

    @property
    def end(self) -> int:
        return self.offset + self.n_rows * self.width


class EmbeddingLM(SoftmaxOutput, Model):
    """Context word embeddings -> tanh hidden layer -> softmax over the vocabulary.

    Parameters
    ----------
    vocab_size
        Words in the vocabulary (ids 0..vocab_size-1, for inputs and labels).
    embed_dim
        Width of each word's embedding row.
    context
        Previous words per example (the dataset's number of features).
    hidden
        Hidden units.
    l2
        Weight decay on the dense layers (not on the embedding table).
    """

    accepts_weights = True

    name = "embedding_lm"
    shape_options = ("embed_dim", "hidden")
    n_params: int

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> EmbeddingLM:
        """Sized by the dataset's vocabulary (or classes) and context width; ``hidden`` is one width."""
        hidden = shape.get("hidden")
        if isinstance(hidden, (list, tuple)):
            if len(hidden) != 1:
                raise ConfigurationError(
                    f"embedding_lm has one hidden layer; hidden must be one width, got {hidden!r}")
            shape["hidden"] = hidden[0]
        vocab = data.attrs.get("vocab_size") or schema.n_classes(data)
        return cls(int(vocab), context=data.n_features, l2=l2, **shape)

    def __init__(self, vocab_size: int, embed_dim: int = 32, context: int = 3, hidden: int = 64, *,
                 l2: float = 0.0) -> None:
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.embed_dim = check_int(embed_dim, "embed_dim")
        self.context = check_int(context, "context")
        self.hidden = check_int(hidden, "hidden")
        self.l2 = check_l2(l2)
        V, D, C, H = self.vocab_size, self.embed_dim, self.context, self.hidden
        self.layout = Layout([("E", (V, D)), ("W1", (C * D, H)), ("b1", (H,)), ("W2", (H, V)), ("b2", (V,))])
        self.n_params = self.layout.size
        self.row_table = RowTable(0, V, D)

    @property
    def n_features(self) -> int:
        return self.context

    @property
    def n_classes(self) -> int:
        return self.vocab_size

    def init_params(self, seed: int | None = None) -> np.ndarray:
        rng, params, views = seeded_zeros(self.layout, seed)
        views["E"][...] = rng.normal(scale=0.1, size=views["E"].shape)
        for layer in ("W1", "W2"):
            fan_in, fan_out = views[layer].shape
            views[layer][...] = init_weights(rng, fan_in, fan_out, "tanh")
        return params

    def _ids(self, X: np.ndarray) -> np.ndarray:
        ids = np.asarray(X)
        if ids.dtype.kind == "f" and not np.array_equal(ids, np.round(ids)):
            raise ModelDataMismatchError("EmbeddingLM needs integer word ids in X, got fractional values")
        ids = ids.astype(np.intp, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ModelDataMismatchError(
                f"EmbeddingLM with vocab_size={self.vocab_size} got word ids in "
                f"[{int(ids.min())}, {int(ids.max())}] in X"
            )
        return ids

    def touched_rows(self, X: np.ndarray) -> np.ndarray:
        """Sorted ids of the table rows a batch's gradient can be non-zero in."""
        return np.unique(self._ids(X))

    def _hidden(self, views: dict[str, np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = views["E"][ids].reshape(ids.shape[0], -1)
        z = affine(e, views["W1"], views["b1"])
        return e, np.tanh(z, out=z)

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        ids = self._ids(X)
        views = self.layout.views(params)
        grad = np.zeros(self.n_params)
        g = self.layout.views(grad)
        loss = 0.0
        for start in range(0, ids.shape[0], _BLOCK_ROWS):
            block, y_block = ids[start : start + _BLOCK_ROWS], y[start : start + _BLOCK_ROWS]
            e, h = self._hidden(views, block)
            block_loss, dz = softmax_link(affine(h, views["W2"], views["b2"]), y_block,
                                          None if w is None else w[start : start + _BLOCK_ROWS])
            loss += block_loss
            g["W2"] += h.T @ dz
            g["b2"] += dz.sum(axis=0)
            dh = dz @ views["W2"].T
            dh *= 1.0 - h * h
            g["W1"] += e.T @ dh
            g["b1"] += dh.sum(axis=0)
            de = (dh @ views["W1"].T).reshape(-1, self.embed_dim)
            np.add.at(g["E"], block.ravel(), de)
        return loss, grad

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        return weight_decay(self.layout, params, self.l2, ("W1", "W2"))

    def decision_function(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        views = self.layout.views(np.asarray(params, dtype=np.float64))
        _, h = self._hidden(views, self._ids(X))
        return affine(h, views["W2"], views["b2"])

    def check_features(self, data: Dataset) -> None:
        super().check_features(data)
        vocab = data.attrs.get("vocab_size")
        if vocab is not None and int(vocab) > self.vocab_size:
            raise ModelDataMismatchError(
                f"the dataset at {data.url!r} has a vocabulary of {vocab} words; "
                f"{self!r} has {self.vocab_size}"
            )

    def _config(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "embed_dim": self.embed_dim, "context": self.context,
                "hidden": self.hidden, "l2": self.l2}
