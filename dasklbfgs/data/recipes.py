"""Dataset recipes: synthetic planted models, scikit-learn's bundled real datasets and
workloads shaped like the DistBelief paper's applications (speech frames, image patches,
next-word prediction; see :mod:`dasklbfgs.data.workloads`).

Every recipe writes a *dataset folder* holding two sharded datasets, ``train`` and
``test``; open them with ``ShardedDataset.open(path / "train")``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, NamedTuple

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs.data._validate import check_fraction, check_shard_rows
from dasklbfgs.data._writer import check_target, written_aside
from dasklbfgs.data.ctr import CROSSES, DEFAULT_HASHED_FEATURES, N_FIELDS, ClickLogs
from dasklbfgs.data.sharded import ShardedDataset
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.data.text_hashed import DEFAULT_TEXT_FEATURES, HashedDocstrings
from dasklbfgs.data.text_hashed import N_CLASSES as N_TEXT_CLASSES
from dasklbfgs.data.workloads import (
    BANDS,
    FRAMES,
    PATCH_SOURCES,
    AcousticFrames,
    DocstringCorpus,
    ImagePatches,
)
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.options import Options, option

SYNTHETIC = {"logistic": "binary", "multinomial": "multiclass", "regression": "regression"}
BUNDLED = {"digits": "multiclass", "breast_cancer": "binary", "wine": "multiclass"}
WORKLOADS = {"acoustic": "multiclass", "patches": "unsupervised", "text": "multiclass"}
SPARSE = {"ctr": "binary", "text-hashed": "multiclass"}  # wide hashed features, stored sparse
RECIPES = tuple(SYNTHETIC) + tuple(BUNDLED) + tuple(WORKLOADS) + tuple(SPARSE)
TEST_BLOCK_OFFSET = 1_000_000  # test rows come from generator blocks no train row uses
DEFAULT_CLASSES = {"multinomial": 3, "acoustic": 128, "text-hashed": N_TEXT_CLASSES}
DIGIT_PATCHES_DEFAULT_ROWS = 10_000  # as many as the sparse autoencoder exercise samples


def _some(help: str, kind: str = "int", none_means: str = "the recipe's", **spec: Any) -> Any:
    """An option only some recipes take; absent, the recipe's default applies."""
    return option(None, help, kind, nullable=True, none_means=none_means, **spec)


@dataclass(frozen=True, kw_only=True)
class RecipeOptions(Options):
    """:func:`make_dataset`'s options, declared once for its defaults, the
    ``dasklbfgs data make`` flags and the pipelines' ``data:`` keys (make_dataset checks
    the values)."""

    solver: ClassVar[str] = "make_dataset"
    rows: int | None = _some("training rows (synthetic and workload recipes)", minimum=1)
    features: int | None = _some("features (synthetic recipes; ctr, text-hashed: the hashed columns)",
                                 none_means="ctr: 2^22, text-hashed: 2^18", minimum=1)
    shard_rows: int = option(50_000, "rows per shard", "int", minimum=1)
    seed: int = option(0, "seeds the generator and the train/test split", "int", minimum=0)
    n_classes: int | None = _some("classes (multinomial, acoustic and text-hashed recipes)",
                                  none_means="3; acoustic: 128; text-hashed: 10", minimum=2, aliases=("classes",))
    ill_conditioned: bool = option(False, "scale features over four orders of magnitude", "bool")
    test_fraction: float = option(0.2, "fraction held out or generated on top", "float", minimum=0, below=1)
    patch_size: int | None = _some("patch side (patches recipe)", none_means="6", minimum=1)
    image_source: str | None = _some("images to cut patches from (patches recipe)", "choice",
                                     none_means="synthetic", choices=PATCH_SOURCES)
    vocab_size: int | None = _some("vocabulary size (text recipe)", none_means="2000", minimum=2,
                                   aliases=("vocab",))
    context: int | None = _some("previous words per pair (text recipe)", none_means="3", minimum=1)


_DEFAULT = RecipeOptions.default


class Split(NamedTuple):
    """What one split of a recipe writes: its row blocks, attributes, column names and
    stored X dtype (None: the writer's default)."""

    blocks: Any
    attrs: dict[str, Any]
    feature_names: list[str] | None = None
    dtype: Any = None


def make_dataset(
    kind: str,
    path: os.PathLike[str] | str,
    *,
    rows: int | None = None,
    features: int | None = None,
    shard_rows: int = _DEFAULT("shard_rows"),
    seed: int = _DEFAULT("seed"),
    n_classes: int | None = None,
    ill_conditioned: bool = _DEFAULT("ill_conditioned"),
    test_fraction: float = _DEFAULT("test_fraction"),
    patch_size: int | None = None,
    image_source: str | None = None,
    vocab_size: int | None = None,
    context: int | None = None,
    overwrite: bool = False,
    on_progress: Callable[[str, int], Any] | None = None,
) -> dict[str, ShardedDataset]:
    """Write the ``train`` and ``test`` datasets of recipe ``kind`` under ``path``.

    Parameters
    ----------
    kind
        ``"logistic"``, ``"multinomial"``, ``"regression"`` (synthetic, any size) or
        ``"digits"``, ``"breast_cancer"``, ``"wine"`` (scikit-learn's bundled data) or
        the workloads ``"acoustic"`` (440 stacked speech-like frame features, labels of a
        teacher network), ``"patches"`` (image patches in [0.1, 0.9] for an autoencoder,
        unsupervised) and ``"text"`` (context -> next word ids from the docstrings of the
        Python standard library); see :mod:`dasklbfgs.data.workloads`; or ``"ctr"``
        (click-through-like impressions: 26 power-law categorical fields and 8 crosses
        hashed into ``features`` columns, 2^22 by default, about 34 non-zeros a row and 3%
        positives, stored sparse; see :mod:`dasklbfgs.data.ctr`) or ``"text-hashed"`` (which
        of the ``n_classes`` (10) standard-library modules with the most docstrings a
        docstring comes from, from its hashed unigram and bigram tf-idf, ``features`` columns,
        2^18 by default, stored sparse; see :mod:`dasklbfgs.data.text_hashed`).
    rows, features
        Size of the synthetic training set (test rows are ``test_fraction`` of it on top).
        The bundled datasets have a fixed size; giving either is an error. ``"acoustic"``
        and ``"patches"`` with ``image_source="synthetic"`` need ``rows``; digit patches
        default to 10,000; ``"text"`` takes ``rows`` as a cap on the training pairs
        (default: all of them; the test pairs are then capped at ``test_fraction`` of
        it). The workloads fix their own width: no ``features``.
    shard_rows
        Rows per shard.
    seed
        Seeds the generator and the train/test split.
    n_classes
        Classes of the multinomial (default 3) and acoustic (default 128) recipes.
    ill_conditioned
        Scale synthetic features over four orders of magnitude.
    test_fraction
        Fraction held out (bundled; the docstrings of ``"text"``; the digit images of
        ``"patches"``) or generated on top (synthetic, acoustic, patches), in [0, 1).
    patch_size
        Side of the square patches of ``"patches"`` (default 6; at most 8 for digits).
    image_source
        Images of ``"patches"``: ``"synthetic"`` (default) or ``"digits"``.
    vocab_size, context
        Vocabulary size including ``<unk>`` and ``<s>`` (default 2000) and number of
        previous words (default 3) of ``"text"``.
    overwrite
        Replace an existing folder at ``path``.
    on_progress
        Called as ``on_progress(split, rows_generated)`` after each generated block
        (``dasklbfgs data make`` draws its progress line with it).

    Returns
    -------
    dict
        ``{"train": ShardedDataset, "test": ShardedDataset}`` (no ``test`` when
        ``test_fraction`` is 0). Each records how it was made in its ``recipe``
        attribute (the kind and every option, defaults filled in).
    """
    if kind not in RECIPES:
        raise ConfigurationError(f"dataset kind must be one of {RECIPES!r}, got {kind!r}")
    shard_rows = check_shard_rows(shard_rows)
    check_fraction(test_fraction, "test_fraction")
    workload_options = {"patch_size": patch_size, "image_source": image_source,
                        "vocab_size": vocab_size, "context": context}
    _check_options_apply(kind, workload_options, n_classes, ill_conditioned)
    given_classes = n_classes
    n_classes = DEFAULT_CLASSES.get(kind, 3) if n_classes is None else n_classes
    target = Path(path)
    check_target(target, overwrite)  # before generating any data
    recipe = SimpleNamespace(rows=rows, features=features, seed=seed, n_classes=n_classes,
                             ill_conditioned=ill_conditioned, test_fraction=test_fraction, **workload_options)
    splits = _recipe_splits(kind, recipe)
    made_with = recipe_record(kind, rows=rows, features=features, shard_rows=shard_rows, seed=seed,
                              n_classes=given_classes, ill_conditioned=ill_conditioned,
                              test_fraction=test_fraction, **workload_options)
    with written_aside(target, overwrite=overwrite) as staging:
        for name, split in splits.items():
            blocks = split.blocks if on_progress is None else _counted(split.blocks, name, on_progress)
            ShardedDataset.from_blocks(
                staging / name, blocks, shard_rows=shard_rows, attrs={**split.attrs, "recipe": made_with},
                feature_names=split.feature_names, dtype=split.dtype,
            )
    return {name: ShardedDataset.open(target / name) for name in splits}


def recipe_record(kind: str, **options: Any) -> dict[str, Any]:
    """What ``make_dataset(kind, **options)`` records in each split's ``recipe`` attribute:
    the kind and every :class:`RecipeOptions` value (defaults filled in), so a dataset says
    how it was made and a reused one can be checked against what is asked."""
    return {"kind": kind, **{name: options.get(name, default) for name, default, _ in RecipeOptions.items()}}


def _recipe_splits(kind: str, recipe: SimpleNamespace) -> dict[str, Any]:
    """The recipe's train/test splits as block generators (nothing written yet), from
    make_dataset's options (``recipe.rows``, ...)."""
    rows, features, seed, test_fraction = recipe.rows, recipe.features, recipe.seed, recipe.test_fraction
    if kind in SYNTHETIC:
        return _synthetic_splits(kind, rows, features, seed, recipe.n_classes, recipe.ill_conditioned, test_fraction)
    if kind == "ctr":
        return _ctr_splits(rows, features, seed, test_fraction)
    if kind == "text-hashed":
        return _text_hashed_splits(rows, features, seed, test_fraction, recipe.n_classes)
    if kind in WORKLOADS:
        if features is not None:
            width = {"acoustic": f"{FRAMES * BANDS} features ({FRAMES} frames x {BANDS} bands)",
                     "patches": "patch_size**2 features", "text": "context features"}[kind]
            raise ConfigurationError(
                f"the {kind!r} recipe has {width}; do not pass features, got {features!r}"
            )
        if kind == "acoustic":
            return _acoustic_splits(rows, seed, test_fraction, recipe.n_classes)
        if kind == "patches":
            return _patch_splits(rows, seed, test_fraction, recipe.patch_size, recipe.image_source)
        return _text_splits(rows, seed, test_fraction, recipe.vocab_size, recipe.context)
    if rows is not None or features is not None:
        raise ConfigurationError(f"the {kind!r} dataset has a fixed size; do not pass rows or features")
    return _bundled_splits(kind, seed, test_fraction)


def _counted(blocks: Iterable[tuple[Any, Any]], split: str, on_progress: Callable[[str, int], Any]):
    rows = 0
    for X, y in blocks:
        yield X, y
        rows += X.shape[0]  # a sparse block has no len()
        on_progress(split, rows)


def _synthetic_splits(kind, rows, features, seed, n_classes, ill_conditioned, test_fraction):
    if rows is None or features is None:
        raise ConfigurationError(f"the {kind!r} recipe needs rows and features")
    n_classes = n_classes if kind == "multinomial" else 2
    problem = SyntheticProblem(kind, n_features=int(features), n_classes=n_classes, seed=seed,
                               ill_conditioned=ill_conditioned)
    attrs: dict[str, Any] = {"task": SYNTHETIC[kind], "source": f"synthetic:{kind}", "seed": seed,
                             "ill_conditioned": ill_conditioned}
    if kind != "regression":
        attrs["n_classes"] = problem.n_classes
    return _generated_splits(problem.blocks, rows, test_fraction, attrs)


def _ctr_splits(rows, features, seed, test_fraction):
    if rows is None:
        raise ConfigurationError("the 'ctr' recipe needs rows (impressions; 1,000,000 or more is realistic)")
    logs = ClickLogs(int(features) if features is not None else DEFAULT_HASHED_FEATURES, seed)
    attrs = {"task": SPARSE["ctr"], "n_classes": 2, "source": "synthetic:ctr", "seed": seed,
             "fields": N_FIELDS, "crosses": len(CROSSES), "hashed_features": logs.n_features}
    return _generated_splits(logs.blocks, rows, test_fraction, attrs)


def _text_hashed_splits(rows, features, seed, test_fraction, n_classes):
    if rows is not None:
        raise ConfigurationError("the 'text-hashed' recipe has one row per docstring of its modules; do not pass "
                                 f"rows, got {rows!r}")
    docs = HashedDocstrings(int(features) if features is not None else DEFAULT_TEXT_FEATURES,
                            int(n_classes), seed, test_fraction)
    attrs = {"task": SPARSE["text-hashed"], "n_classes": docs.n_classes, "classes": docs.modules,
             "source": "stdlib docstrings: hashed unigrams and bigrams, tf-idf", "seed": seed,
             "hashed_features": docs.n_features}
    return {split: Split(docs.blocks(split), attrs) for split in ("train", "test") if docs.n_rows(split)}


def _bundled_splits(kind, seed, test_fraction):
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    bunch = getattr(datasets, f"load_{kind}")()
    X, y = bunch.data.astype(np.float64), bunch.target.astype(np.int64)
    names = [str(n) for n in getattr(bunch, "feature_names", [])] or None
    attrs = {"task": BUNDLED[kind], "n_classes": int(len(np.unique(y))),
             "source": f"sklearn.datasets.load_{kind}", "seed": seed}
    if test_fraction == 0:
        return {"train": Split([(X, y)], attrs, names)}
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return {"train": Split([(X_tr, y_tr)], attrs, names), "test": Split([(X_te, y_te)], attrs, names)}


def _check_options_apply(kind, workload_options, n_classes, ill_conditioned) -> None:
    """Refuse options the recipe would ignore (no silently dropped arguments)."""
    owner = {"patch_size": "patches", "image_source": "patches", "vocab_size": "text", "context": "text"}
    for name, value in workload_options.items():
        if value is not None and owner[name] != kind:
            raise ConfigurationError(f"{name} applies to the {owner[name]!r} recipe only, not {kind!r}")
    if n_classes is not None and kind in ("patches", "text"):
        hint = "; the classes of 'text' are its vocab_size" if kind == "text" else " (unsupervised)"
        raise ConfigurationError(f"the {kind!r} recipe takes no n_classes{hint}, got {n_classes!r}")
    if n_classes is not None and kind == "ctr":
        raise ConfigurationError(f"the {kind!r} recipe is binary (clicks); it takes no n_classes, got {n_classes!r}")
    if ill_conditioned and (kind in WORKLOADS or kind in SPARSE):
        raise ConfigurationError(f"ill_conditioned applies to the synthetic recipes only, not {kind!r}")


def _rows_on_top(rows, test_fraction) -> int:
    return int(round(rows * test_fraction))


def _generated_splits(blocks, rows, test_fraction, attrs, names=None, **test_options):
    """Train rows from the first blocks of ``blocks(n_rows, first_block=...)`` and, if
    ``test_fraction`` of them round to any, test rows on top from blocks no train row uses."""
    splits = {"train": Split(blocks(int(rows)), attrs, names)}
    if test_rows := _rows_on_top(rows, test_fraction):
        test_blocks = blocks(test_rows, first_block=TEST_BLOCK_OFFSET, **test_options)
        splits["test"] = Split(test_blocks, attrs, names)
    return splits


def _acoustic_splits(rows, seed, test_fraction, n_classes):
    if rows is None:
        raise ConfigurationError("the 'acoustic' recipe needs rows")
    rows = check_int(rows, "rows")
    frames = AcousticFrames(n_classes=n_classes, seed=seed)
    attrs = {"task": WORKLOADS["acoustic"], "n_classes": frames.n_classes, "source": "synthetic:acoustic",
             "frames": FRAMES, "bands": BANDS, "seed": seed}
    return _generated_splits(frames.blocks, rows, test_fraction, attrs, frames.feature_names())


def _patch_splits(rows, seed, test_fraction, patch_size, image_source):
    source = "synthetic" if image_source is None else image_source
    if source not in PATCH_SOURCES:  # before the other checks: it decides which apply
        raise ConfigurationError(f"image_source must be one of {PATCH_SOURCES!r}, got {image_source!r}")
    patches = ImagePatches(patch_size=6 if patch_size is None else patch_size, source=source,
                           seed=seed, held_out_fraction=test_fraction)
    if rows is None:
        if source == "synthetic":
            raise ConfigurationError("the 'patches' recipe with image_source='synthetic' needs rows")
        rows = DIGIT_PATCHES_DEFAULT_ROWS
    rows = check_int(rows, "rows")
    attrs = {"task": WORKLOADS["patches"], "patch_size": patches.patch_size, "source": source,
             "scaled_range": [0.1, 0.9], "seed": seed}
    names = patches.feature_names()
    return _generated_splits(patches.blocks, rows, test_fraction, attrs, names, held_out=True)


def _text_splits(rows, seed, test_fraction, vocab_size, context):
    if rows is not None:
        rows = check_int(rows, "rows")
    corpus = DocstringCorpus(vocab_size=2000 if vocab_size is None else vocab_size,
                             context=3 if context is None else context,
                             seed=seed, test_fraction=test_fraction)
    names = corpus.feature_names()
    splits = {}
    test_cap = None if rows is None else _rows_on_top(rows, test_fraction)
    for name, cap in (("train", rows), ("test", test_cap)):
        if corpus.n_docstrings(name) == 0 or cap == 0:
            continue
        attrs = {**corpus.attrs(), "docstrings": corpus.n_docstrings(name)}
        splits[name] = Split(corpus.blocks(name, cap), attrs, names, dtype=np.int32)
    return splits
