"""Datasets shaped like the applications of DistBelief, at any size.

Dean et al., *Large Scale Distributed Deep Networks* (NIPS 2012), Sec. 5, train an
acoustic model whose input is 11 frames of 40 log-energy values and whose output is a
softmax over 8192 states; the same system trained sparse-autoencoder feature learners on
image patches (Le et al., ICML 2012) and neural language models. These generators write
data of those shapes:

- :class:`AcousticFrames`: 440 = 11 x 40 temporally correlated log-energy-like inputs,
  labelled by a fixed random teacher network over ``n_classes`` states;
- :class:`ImagePatches`: small image patches scaled into [0.1, 0.9], from scikit-learn's
  8x8 digits or from smooth synthetic images, for a sigmoid-output autoencoder;
- :class:`DocstringCorpus`: (context -> next word) pairs from the docstrings of the
  Python standard library.

Generated rows come block by block from ``default_rng([seed, block, stream])``, so the
data is the same for the same seed whatever shard size the writer uses.
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs.data._stdlib_text import BOUNDARY, STDLIB_MODULES, stdlib_docstrings, tokenize
from dasklbfgs.data._validate import check_fraction
from dasklbfgs.data.synthetic import seeded_blocks
from dasklbfgs.errors import ConfigurationError

__all__ = ["AcousticFrames", "ImagePatches", "DocstringCorpus", "PATCH_SOURCES"]

FRAMES, BANDS = 11, 40
ACOUSTIC_BLOCK_ROWS = 8192  # 8192 x 440 float32 is 14 MB; a fixed size keeps the draws fixed
PATCH_BLOCK_ROWS = 16_384
TEXT_BLOCK_ROWS = 65_536
PATCH_SOURCES = ("synthetic", "digits")
DIGITS_SIDE = 8
UNKNOWN = "<unk>"

# Third seed word of each workload's block generators: [seed, block] alone is the planted
# linear models' stream (synthetic.py). Never 0: SeedSequence pads with zeros.
_ACOUSTIC_STREAM, _PATCH_STREAM, _TEXT_STREAM = 1, 2, 3
_TEACHER_KEY = 2**31 - 2  # the planted linear models use 2**31 - 1
_CALIBRATION_KEY = 2**31 - 3
_CALIBRATION_ROWS = 8192


# -- speech-like frames -----------------------------------------------------------------


@dataclass(frozen=True)
class AcousticFrames:
    """Acoustic-model-like inputs and labels.

    Each row stacks 11 frames x 40 bands (frame-major: column ``40 t + b``). A frame is

    .. math:: x_{t,b} = \\mu_b + e_b + 0.7\\, a_{t,b}, \\qquad
              a_{t} = \\rho\\, a_{t-1} + \\sqrt{1-\\rho^2}\\, \\varepsilon_t

    with a falling mean log-energy profile :math:`\\mu_b`, a smooth per-row spectral
    envelope :math:`e` (a random low-order cosine series over the bands plus a level,
    constant across the 11 frames) and an AR(1) process :math:`a` along time whose unit
    innovations :math:`\\varepsilon_t` are smoothed across neighbouring bands.

    Labels come from a fixed random *teacher*: inputs standardised, one hidden layer of
    ``hidden_units`` tanh units, a linear layer to ``n_classes`` logits, each logit
    standardised over a calibration sample (so that every class wins about equally
    often), then the argmax. Weights are drawn from ``default_rng([seed, 2**31 - 2])``.
    """

    n_classes: int = 128
    seed: int = 0
    hidden_units: int = 64
    ar_coefficient: float = 0.9

    def __post_init__(self) -> None:
        check_int(self.n_classes, "n_classes", minimum=2)
        check_int(self.hidden_units, "hidden_units", minimum=1)
        check_fraction(self.ar_coefficient, "ar_coefficient")

    @property
    def n_features(self) -> int:
        return FRAMES * BANDS

    @staticmethod
    def feature_names() -> list[str]:
        """``t-5_band00`` ... ``t+5_band39``: frame offset from the centre frame, band."""
        return [f"t{t - FRAMES // 2:+d}_band{b:02d}" for t in range(FRAMES) for b in range(BANDS)]

    def frames(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """``rows`` stacked-frame inputs, float32 ``(rows, 440)``, drawn from ``rng``."""
        bands = np.arange(BANDS)
        profile = (2.0 - 3.0 * bands / (BANDS - 1)).astype(np.float32)
        order = np.arange(1, 7)
        basis = np.cos(np.pi * np.outer(order, bands + 0.5) / BANDS).astype(np.float32)
        weights = rng.standard_normal((rows, order.size), dtype=np.float32)
        envelope = weights @ (basis * (0.8 / order)[:, None].astype(np.float32))
        envelope += 0.5 * rng.standard_normal((rows, 1), dtype=np.float32)
        noise = rng.standard_normal((rows * FRAMES, BANDS), dtype=np.float32) @ _band_smoother()
        noise = noise.reshape(rows, FRAMES, BANDS)
        rho = np.float32(self.ar_coefficient)
        keep = np.float32(np.sqrt(1.0 - self.ar_coefficient**2))
        for t in range(1, FRAMES):  # noise[:, 0] is already stationary (unit variance)
            noise[:, t] = rho * noise[:, t - 1] + keep * noise[:, t]
        X = (profile + envelope)[:, None, :] + np.float32(0.7) * noise
        return X.reshape(rows, FRAMES * BANDS)

    @cached_property
    def _teacher(self) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
        """The teacher's input standardisation and weights, and its logits' mean and std."""
        rng = np.random.default_rng([self.seed, _TEACHER_KEY])
        d, h = self.n_features, self.hidden_units
        W1 = (rng.standard_normal((d, h)) * (2.0 / np.sqrt(d))).astype(np.float32)
        b1 = (rng.standard_normal(h) * 0.5).astype(np.float32)
        W2 = rng.standard_normal((h, self.n_classes)).astype(np.float32)
        sample = self.frames(np.random.default_rng([self.seed, _CALIBRATION_KEY]), _CALIBRATION_ROWS)
        network = (sample.mean(axis=0), sample.std(axis=0), W1, b1, W2)
        logits = _teacher_logits(sample, network)
        return network, logits.mean(axis=0), logits.std(axis=0)

    def labels(self, X: np.ndarray) -> np.ndarray:
        """The teacher's class (int64) for each row of ``X``."""
        network, z_mean, z_std = self._teacher
        return ((_teacher_logits(X, network) - z_mean) / z_std).argmax(axis=1).astype(np.int64)

    def blocks(self, n_rows: int, *, first_block: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(X, y)`` blocks that together hold ``n_rows`` rows."""
        blocks = seeded_blocks(n_rows, ACOUSTIC_BLOCK_ROWS, self.seed, first_block, _ACOUSTIC_STREAM)
        for rng, rows in blocks:
            X = self.frames(rng, rows)
            yield X, self.labels(X)


def _teacher_logits(X: np.ndarray, network: tuple[np.ndarray, ...]) -> np.ndarray:
    x_mean, x_std, W1, b1, W2 = network
    return np.tanh(((X - x_mean) / x_std) @ W1 + b1) @ W2


def _band_smoother() -> np.ndarray:
    """(40, 40) matrix averaging each band with its neighbours (1/4, 1/2, 1/4), scaled so
    white noise keeps unit variance; a matrix product is far faster than shifted slices."""
    S = 0.5 * np.eye(BANDS) + 0.25 * (np.eye(BANDS, k=1) + np.eye(BANDS, k=-1))
    return (S / np.sqrt((S**2).sum(axis=0))).astype(np.float32)


# -- image patches ------------------------------------------------------------------------


@dataclass(frozen=True)
class ImagePatches:
    """Square image patches, flattened row-major, scaled into [0.1, 0.9].

    ``source="digits"`` cuts random ``patch_size`` patches (8 for whole images) from
    scikit-learn's 8x8 digits; the images are split once, ``held_out_fraction`` of them
    reserved for the test split, so no test patch overlaps a training image.
    ``source="synthetic"`` draws smooth images of 1-3 primitives (oriented edges, bars,
    blobs) with a little pixel noise.

    Scaling follows the classic sparse-autoencoder exercise (Ng, *Sparse autoencoder*,
    CS294A lecture notes, 2011, ``sampleIMAGES``): subtract each patch's mean, clip to
    :math:`\\pm 3\\sigma` (:math:`\\sigma` the pixel standard deviation over training
    patches), rescale to [-1, 1], then map to [0.1, 0.9] where a sigmoid output can reach.
    """

    patch_size: int = 6
    source: str = "synthetic"
    seed: int = 0
    held_out_fraction: float = 0.2

    def __post_init__(self) -> None:
        if self.source not in PATCH_SOURCES:
            raise ConfigurationError(f"image source must be one of {PATCH_SOURCES!r}, got {self.source!r}")
        check_int(self.patch_size, "patch_size", minimum=2)  # a 1x1 patch minus its mean is 0
        check_fraction(self.held_out_fraction, "held_out_fraction")
        if self.source == "digits" and self.patch_size > DIGITS_SIDE:
            raise ConfigurationError(
                f"patch_size must be at most {DIGITS_SIDE} for the 8x8 digits images, "
                f"got {self.patch_size!r}"
            )

    @property
    def n_features(self) -> int:
        return self.patch_size**2

    def feature_names(self) -> list[str]:
        """``px_r0_c0`` ... : pixel row and column within the patch."""
        p = self.patch_size
        return [f"px_r{r}_c{c}" for r in range(p) for c in range(p)]

    @cached_property
    def _digit_pools(self) -> tuple[np.ndarray, np.ndarray]:
        """Training and held-out digit images, ``(n, 8, 8)`` floats."""
        from sklearn.datasets import load_digits

        images = load_digits().images.astype(np.float64)
        order = np.random.default_rng([self.seed, _CALIBRATION_KEY, _PATCH_STREAM]).permutation(len(images))
        n_test = int(round(len(images) * self.held_out_fraction))
        return images[np.sort(order[n_test:])], images[np.sort(order[:n_test])]

    @cached_property
    def sigma(self) -> float:
        """Pixel standard deviation of mean-removed training patches: over every patch of
        every training digit, or over a calibration sample of synthetic patches."""
        if self.source == "digits":
            train = self._digit_pools[0]
            p, span = self.patch_size, DIGITS_SIDE - self.patch_size + 1
            corners = [(r, c) for r in range(span) for c in range(span)]
            raw = np.concatenate([train[:, r : r + p, c : c + p].reshape(len(train), -1) for r, c in corners])
        else:
            raw = self._synthetic(np.random.default_rng([self.seed, _CALIBRATION_KEY]), _CALIBRATION_ROWS)
        return float((raw - raw.mean(axis=1, keepdims=True)).std())

    def _scaled(self, raw: np.ndarray) -> np.ndarray:
        limit = 3.0 * self.sigma
        centred = raw - raw.mean(axis=1, keepdims=True)
        unit = np.clip(centred, -limit, limit) / limit if limit > 0 else centred
        return (0.4 * unit + 0.5).astype(np.float32)

    def _digits(self, rng: np.random.Generator, rows: int, held_out: bool) -> np.ndarray:
        pool = self._digit_pools[1 if held_out else 0]
        if len(pool) == 0:
            raise ConfigurationError("no digit images are held out for the test split; raise test_fraction")
        p, span = self.patch_size, DIGITS_SIDE - self.patch_size + 1
        image = rng.integers(0, len(pool), rows)
        top, left = rng.integers(0, span, rows), rng.integers(0, span, rows)
        patches = np.lib.stride_tricks.sliding_window_view(pool, (p, p), axis=(1, 2))
        return patches[image, top, left].reshape(rows, p * p)

    def _synthetic(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """Sum of up to three primitives on the unit square, sampled at pixel centres."""
        grid = (np.arange(self.patch_size) + 0.5) / self.patch_size
        x, y = grid[None, None, :], grid[None, :, None]
        image = np.zeros((rows, self.patch_size, self.patch_size))
        for slot in range(3):
            kind = rng.integers(0, 3, rows)
            active = (rng.random(rows) < 0.5) | (slot == 0)
            amplitude = rng.normal(0.0, 1.0, rows) * active
            cx, cy = rng.uniform(-0.2, 1.2, rows), rng.uniform(-0.2, 1.2, rows)
            angle = rng.uniform(0.0, np.pi, rows)
            width = rng.uniform(0.04, 0.3, rows)
            cx, cy, angle, width = (v[:, None, None] for v in (cx, cy, angle, width))
            across = (x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)
            shapes = (
                np.tanh(across / width),                                        # edge
                np.exp(-0.5 * (across / width) ** 2),                           # bar
                np.exp(-0.5 * ((x - cx) ** 2 + (y - cy) ** 2) / (width + 0.1) ** 2),  # blob
            )
            image += amplitude[:, None, None] * np.choose(kind[:, None, None], shapes)
        image += 0.02 * rng.standard_normal(image.shape)
        return image.reshape(rows, -1)

    def blocks(
        self, n_rows: int, *, first_block: int = 0, held_out: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(X, y)`` blocks holding ``n_rows`` patches; ``y`` is a zero column (the
        data is unsupervised). ``held_out`` draws digit patches from the held-out images."""
        for rng, rows in seeded_blocks(n_rows, PATCH_BLOCK_ROWS, self.seed, first_block, _PATCH_STREAM):
            if self.source == "digits":
                raw = self._digits(rng, rows, held_out)
            else:
                raw = self._synthetic(rng, rows)
            yield self._scaled(raw), np.zeros(rows, dtype=np.int8)


# -- next-word prediction -------------------------------------------------------------------


@dataclass(frozen=True)
class DocstringCorpus:
    """(previous ``context`` words -> next word) pairs from standard library docstrings.

    Docstrings are tokenized and those with the same tokens kept once; docstring ``i``
    (in collection order) then goes to the test split when
    ``floor((i + 1) f) > floor(i f)`` for ``f = test_fraction``: an even, deterministic
    spread, and no docstring is in both splits (a common sentence may recur in both).
    The vocabulary is ``<unk>`` (0), ``<s>`` (1), then the ``vocab_size - 2`` most
    frequent training words (ties broken alphabetically). Contexts at a docstring's
    start are padded with ``<s>``; ``<s>`` also closes every sentence, so it is a target
    too. Within each split the docstrings are shuffled by ``seed``, so shards mix modules.
    """

    vocab_size: int = 2000
    context: int = 3
    seed: int = 0
    test_fraction: float = 0.2

    def __post_init__(self) -> None:
        check_int(self.vocab_size, "vocab_size", minimum=3)
        check_int(self.context, "context", minimum=1)
        check_fraction(self.test_fraction, "test_fraction")
        available = len(self._word_counts) + 2
        if self.vocab_size > available:
            raise ConfigurationError(
                f"vocab_size must be at most {available} (the training docstrings hold "
                f"{available - 2} distinct words), got {self.vocab_size!r}"
            )

    @cached_property
    def _tokenized(self) -> tuple[list[list[str]], list[list[str]]]:
        # Docstrings that differ only in punctuation, case or digits ("Return a + b." and
        # "Return a - b.") tokenize alike; one copy is kept so no sequence is in both splits.
        unique = dict.fromkeys(tuple(tokenize(doc)) for doc in stdlib_docstrings())
        train: list[list[str]] = []
        test: list[list[str]] = []
        f = self.test_fraction
        for i, tokens in enumerate(t for t in unique if t):
            to_test = int((i + 1) * f) > int(i * f)
            (test if to_test else train).append(list(tokens))
        return train, test

    @cached_property
    def _word_counts(self) -> Counter[str]:
        return Counter(w for doc in self._tokenized[0] for w in doc if w != BOUNDARY)

    @cached_property
    def vocabulary(self) -> list[str]:
        """Words by id: ``<unk>``, ``<s>``, then the most frequent training words."""
        ranked = sorted(self._word_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [UNKNOWN, BOUNDARY] + [w for w, _ in ranked[: self.vocab_size - 2]]

    def n_docstrings(self, split: str) -> int:
        return len(self._tokenized[_split_index(split)])

    def feature_names(self) -> list[str]:
        """``w-3``, ``w-2``, ``w-1`` for ``context=3``: the word that many places back."""
        return [f"w-{k}" for k in range(self.context, 0, -1)]

    def pairs(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """All ``(X, y)`` pairs of ``split`` (``"train"`` or ``"test"``): X int32
        ``(n, context)`` word ids, oldest first; y int64 next word ids."""
        index = _split_index(split)
        docs = self._tokenized[index]
        ids = {w: i for i, w in enumerate(self.vocabulary)}
        pad = [ids[BOUNDARY]] * self.context
        order = np.random.default_rng([self.seed, index + 1, _TEXT_STREAM]).permutation(len(docs))
        X_parts, y_parts = [], []
        for d in order:
            seq = np.array(pad + [ids.get(w, 0) for w in docs[d]], dtype=np.int32)
            windows = np.lib.stride_tricks.sliding_window_view(seq, self.context + 1)
            X_parts.append(windows[:, :-1])
            y_parts.append(windows[:, -1].astype(np.int64))
        if not X_parts:
            return np.zeros((0, self.context), np.int32), np.zeros(0, np.int64)
        return np.concatenate(X_parts), np.concatenate(y_parts)

    def blocks(self, split: str, max_rows: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield the pairs of ``split`` in blocks, the first ``max_rows`` only if given."""
        X, y = self.pairs(split)
        n = len(y) if max_rows is None else min(max_rows, len(y))
        for start in range(0, n, TEXT_BLOCK_ROWS):
            stop = min(start + TEXT_BLOCK_ROWS, n)
            yield X[start:stop], y[start:stop]

    def attrs(self) -> dict:
        return {
            "task": "multiclass", "n_classes": self.vocab_size, "vocab_size": self.vocab_size,
            "context": self.context, "source": "stdlib-docstrings",
            "python_version": platform.python_version(), "modules": list(STDLIB_MODULES),
            "seed": self.seed, "vocabulary": self.vocabulary,
        }


def _split_index(split: str) -> int:
    if split not in ("train", "test"):
        raise ConfigurationError(f"split must be 'train' or 'test', got {split!r}")
    return 0 if split == "train" else 1
