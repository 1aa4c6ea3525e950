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
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from dasklbfgs.data.claims import FEATURE_NAMES, Claims, feature_names
from dasklbfgs.data.ctr import CROSSES, DEFAULT_HASHED_FEATURES, N_FIELDS, ClickLogs
from dasklbfgs.data.location import Location
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
from dasklbfgs.options import Options, option, options_doc

if TYPE_CHECKING:
    from dasklbfgs.data.sharded import ShardedDataset

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
    n_classes: int | None = _some(
        "classes (multinomial, acoustic and text-hashed recipes)", minimum=2, aliases=("classes",),
        none_means="; ".join(f"{kind}: {n}" for kind, n in DEFAULT_CLASSES.items()))
    ill_conditioned: bool = option(False, "scale features over four orders of magnitude", "bool")
    test_fraction: float = option(0.2, "fraction held out or generated on top", "float", minimum=0, below=1)
    patch_size: int | None = _some("patch side (patches recipe)", none_means="6", minimum=2)
    image_source: str | None = _some("images to cut patches from (patches recipe)", "choice",
                                     none_means="synthetic", choices=PATCH_SOURCES)
    vocab_size: int | None = _some("vocabulary size (text recipe)", none_means="2000", minimum=3,
                                   aliases=("vocab",))
    context: int | None = _some("previous words per pair (text recipe)", none_means="3", minimum=1)


class Split(NamedTuple):
    """What one split of a recipe writes: its row blocks, attributes, column names and
    stored X dtype (None: the writer's default)."""

    blocks: Any
    attrs: dict[str, Any]
    feature_names: list[str] | None = None
    dtype: Any = None


def make_dataset(kind: str, path: os.PathLike[str] | str, *, overwrite: bool = False,
                 on_progress: Callable[[str, int], Any] | None = None, storage_options: dict[str, Any] | None = None,
                 **options: Any) -> dict[str, ShardedDataset]:
    """Write the ``train`` and ``test`` datasets of recipe ``kind`` under ``path``.

    Parameters
    ----------
    kind
        The recipe (:data:`RECIPES`).
    path
        The folder to write (``train`` and ``test`` under it), or a URL (``s3://...``,
        reached with ``storage_options``): there each split is committed on its own.
    overwrite
        Replace an existing folder at ``path``.
    on_progress
        Called as ``on_progress(split, rows_generated)`` after each generated block
        (``dasklbfgs data make`` draws its progress line with it).
    **options
        :class:`RecipeOptions` (below); a recipe refuses the ones it does not take
        (:attr:`Recipe.takes`), and each defaults to what the recipe's text above says.

    Returns
    -------
    dict
        ``{"train": ShardedDataset, "test": ShardedDataset}`` (no ``test`` when
        ``test_fraction`` is 0). Each records how it was made in its ``recipe``
        attribute (the kind and every option, defaults filled in).

    Options
    -------
    {options}
    """
    # zarr and the writer load when a recipe writes: the command line reads RECIPES for its flags
    from dasklbfgs.data._writer import check_target, written_aside
    from dasklbfgs.data.sharded import ShardedDataset

    if kind not in RECIPES:
        raise ConfigurationError(f"dataset kind must be one of {tuple(RECIPES)!r}, got {kind!r}")
    from dasklbfgs.data._writer import check_remote_target

    recipe = RECIPES[kind]
    checked = recipe.options(options)
    location = Location.of(path, storage_options)
    if location.is_local:
        check_target(location.path, overwrite)  # before generating any data
    else:
        check_remote_target(location, overwrite)
    splits = recipe.splits(kind, checked)
    made_with = _record(kind, checked)

    def write(where: Location) -> None:
        for name, split in splits.items():
            blocks = split.blocks if on_progress is None else _counted(split.blocks, name, on_progress)
            ShardedDataset.from_blocks(
                where / name, blocks, shard_rows=checked.shard_rows, attrs={**split.attrs, "recipe": made_with},
                feature_names=split.feature_names, dtype=split.dtype, overwrite=overwrite,
            )

    if location.is_local:
        with written_aside(location.path, overwrite=overwrite) as staging:
            write(Location.of(staging))
    else:  # each split committed on its own (no rename for the folder); a split no longer made goes
        write(location)
        for stale in set(location.groups_below()) - set(splits):
            (location / stale).remove()
    return {name: ShardedDataset.open(location / name) for name in splits}


def recipe_record(kind: str, **options: Any) -> dict[str, Any]:
    """What ``make_dataset(kind, **options)`` records in each split's ``recipe`` attribute:
    the kind and every :class:`RecipeOptions` value (defaults filled in), so a dataset says
    how it was made and a reused one can be checked against what is asked."""
    return _record(kind, RecipeOptions.from_mapping(RecipeOptions.canonical(options)))


def _record(kind: str, options: RecipeOptions) -> dict[str, Any]:
    return {"kind": kind, **options.to_json()}


def _counted(blocks: Iterable[tuple[Any, ...]], split: str, on_progress: Callable[[str, int], Any]):
    rows = 0
    for block in blocks:
        yield block
        rows += block[0].shape[0]  # a sparse block has no len()
        on_progress(split, rows)


def _synthetic_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    if o.rows is None or o.features is None:
        raise ConfigurationError(f"the {kind!r} recipe needs rows and features", parameters=("rows", "features"))
    n_classes = _classes(kind, o) if kind == "multinomial" else 2
    problem = SyntheticProblem(kind, n_features=int(o.features), n_classes=n_classes, seed=o.seed,
                               ill_conditioned=o.ill_conditioned)
    attrs: dict[str, Any] = {"task": RECIPES[kind].task, "source": f"synthetic:{kind}", "seed": o.seed,
                             "ill_conditioned": o.ill_conditioned}
    if RECIPES[kind].task in ("binary", "multiclass"):
        attrs["n_classes"] = problem.n_classes
    return _generated_splits(problem.blocks, o.rows, o.test_fraction, attrs)


def _ctr_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    if o.rows is None:
        raise ConfigurationError("the 'ctr' recipe needs rows (impressions; 1,000,000 or more is realistic)",
                                 parameters=("rows",))
    logs = ClickLogs(int(o.features) if o.features is not None else DEFAULT_HASHED_FEATURES, o.seed)
    attrs = {"task": RECIPES[kind].task, "n_classes": 2, "source": "synthetic:ctr", "seed": o.seed,
             "fields": N_FIELDS, "crosses": len(CROSSES), "hashed_features": logs.n_features}
    return _generated_splits(logs.blocks, o.rows, o.test_fraction, attrs)


def _claims_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    """Claim counts with their exposure offsets (``train``, ``test``: a Poisson frequency
    model) and the average sizes of the policies with claims, weighted by their counts
    (``severity-train``, ``severity-test``: a Gamma severity model), of the same policies."""
    if o.rows is None:
        raise ConfigurationError("the 'claims' recipe needs rows (policies)", parameters=("rows",))
    claims = Claims(o.seed, len(FEATURE_NAMES) if o.features is None else int(o.features))
    names = feature_names(claims.n_features)
    attrs = {"source": "synthetic:claims", "seed": o.seed, "offset": "log(exposure in years)"}
    splits = _generated_splits(claims.frequency_blocks, o.rows, o.test_fraction, {**attrs, "task": "counts"}, names)
    severity = _generated_splits(claims.severity_blocks, o.rows, o.test_fraction,
                                 {**attrs, "task": "amounts", "weights": "claim counts"}, names)
    return {**splits, **{f"severity-{name}": split for name, split in severity.items()}}


def _text_hashed_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    docs = HashedDocstrings(int(o.features) if o.features is not None else DEFAULT_TEXT_FEATURES,
                            _classes(kind, o), o.seed, o.test_fraction)
    attrs = {"task": RECIPES[kind].task, "n_classes": docs.n_classes, "classes": docs.modules,
             "source": "stdlib docstrings: hashed unigrams and bigrams, tf-idf", "seed": o.seed,
             "hashed_features": docs.n_features}
    return {split: Split(docs.blocks(split), attrs) for split in ("train", "test") if docs.n_rows(split)}


def _bundled_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    bunch = getattr(datasets, f"load_{kind}")()
    X, y = bunch.data.astype(np.float64), bunch.target.astype(np.int64)
    names = [str(n) for n in getattr(bunch, "feature_names", [])] or None
    attrs = {"task": RECIPES[kind].task, "n_classes": int(len(np.unique(y))),
             "source": f"sklearn.datasets.load_{kind}", "seed": o.seed}
    if o.test_fraction == 0:
        return {"train": Split([(X, y)], attrs, names)}
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=o.test_fraction, random_state=o.seed, stratify=y
    )
    return {"train": Split([(X_tr, y_tr)], attrs, names), "test": Split([(X_te, y_te)], attrs, names)}


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


def _acoustic_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    if o.rows is None:
        raise ConfigurationError("the 'acoustic' recipe needs rows", parameters=("rows",))
    frames = AcousticFrames(n_classes=_classes(kind, o), seed=o.seed)
    attrs = {"task": RECIPES[kind].task, "n_classes": frames.n_classes, "source": "synthetic:acoustic",
             "frames": FRAMES, "bands": BANDS, "seed": o.seed}
    return _generated_splits(frames.blocks, o.rows, o.test_fraction, attrs, frames.feature_names())


def _patch_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    source = "synthetic" if o.image_source is None else o.image_source
    patches = ImagePatches(patch_size=6 if o.patch_size is None else o.patch_size, source=source,
                           seed=o.seed, held_out_fraction=o.test_fraction)
    rows = o.rows
    if rows is None:
        if source == "synthetic":
            raise ConfigurationError("the 'patches' recipe with image_source='synthetic' needs rows",
                                     parameters=("image_source", "rows"))
        rows = DIGIT_PATCHES_DEFAULT_ROWS
    attrs = {"task": RECIPES[kind].task, "patch_size": patches.patch_size, "source": source,
             "scaled_range": [0.1, 0.9], "seed": o.seed}
    names = patches.feature_names()
    return _generated_splits(patches.blocks, rows, o.test_fraction, attrs, names, held_out=True)


def _text_splits(kind: str, o: RecipeOptions) -> dict[str, Split]:
    rows, test_fraction = o.rows, o.test_fraction
    corpus = DocstringCorpus(vocab_size=2000 if o.vocab_size is None else o.vocab_size,
                             context=3 if o.context is None else o.context,
                             seed=o.seed, test_fraction=test_fraction)
    names = corpus.feature_names()
    splits = {}
    test_cap = None if rows is None else _rows_on_top(rows, test_fraction)
    for name, cap in (("train", rows), ("test", test_cap)):
        if corpus.n_docstrings(name) == 0 or cap == 0:
            continue
        attrs = {**corpus.attrs(), "docstrings": corpus.n_docstrings(name)}
        splits[name] = Split(corpus.blocks(name, cap), attrs, names, dtype=np.int32)
    return splits


def _classes(kind: str, o: RecipeOptions) -> int:
    """The recipe's classes: the option, else the recipe's default."""
    return DEFAULT_CLASSES[kind] if o.n_classes is None else o.n_classes


EVERY_RECIPE = ("shard_rows", "seed", "test_fraction")  # the options every recipe takes
FIXED_SIZE = "scikit-learn's bundled data have a fixed size"


@dataclass(frozen=True)
class Recipe:
    """A dataset recipe, declared once: its name, the task its labels are for (the model it
    implies, :func:`~dasklbfgs.models.registry.default_model`), the :class:`RecipeOptions`
    it takes besides :data:`EVERY_RECIPE`, and how it makes its splits from checked options
    (``splits(name, options)``). A new recipe is its split function plus its line in
    :data:`RECIPES`."""

    name: str
    task: str
    takes: tuple[str, ...]
    splits: Callable[[str, RecipeOptions], dict[str, Split]]
    #: why the recipe takes no such option, where that helps (shown in the refusal)
    notes: tuple[tuple[str, str], ...] = ()

    def options(self, values: dict[str, Any]) -> RecipeOptions:
        """``values`` as checked options (names, types, ranges: :class:`RecipeOptions`),
        refusing a value given for an option this recipe does not take (none is dropped
        silently)."""
        options = RecipeOptions.from_mapping(RecipeOptions.canonical(values))
        for name, default, _ in RecipeOptions.items():
            value = getattr(options, name)
            if name not in EVERY_RECIPE + self.takes and value != default:
                takes = ", ".join(self.takes) if self.takes else "none besides " + ", ".join(EVERY_RECIPE)
                why = dict(self.notes).get(name, f"its options: {takes}")
                raise ConfigurationError(f"the {self.name!r} recipe takes no {name} ({why}), got {value!r}")
        return options


RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in (
    # synthetic planted models, any size
    Recipe("logistic", "binary", ("rows", "features", "ill_conditioned"), _synthetic_splits),
    Recipe("multinomial", "multiclass", ("rows", "features", "n_classes", "ill_conditioned"), _synthetic_splits),
    Recipe("regression", "regression", ("rows", "features", "ill_conditioned"), _synthetic_splits),
    Recipe("counts", "counts", ("rows", "features", "ill_conditioned"), _synthetic_splits),
    Recipe("amounts", "amounts", ("rows", "features", "ill_conditioned"), _synthetic_splits),
    Recipe("claims", "counts", ("rows", "features"), _claims_splits),
    # scikit-learn's bundled real datasets, of a fixed size
    *(Recipe(name, task, (), _bundled_splits, (("rows", FIXED_SIZE), ("features", FIXED_SIZE)))
      for name, task in (("digits", "multiclass"), ("breast_cancer", "binary"), ("wine", "multiclass"))),
    # the paper's workloads (docs/algorithms.md), of a fixed width
    Recipe("acoustic", "multiclass", ("rows", "n_classes"), _acoustic_splits,
           (("features", f"it has {FRAMES * BANDS} features: {FRAMES} frames x {BANDS} bands"),)),
    Recipe("patches", "unsupervised", ("rows", "patch_size", "image_source"), _patch_splits,
           (("features", "it has patch_size**2 features"), ("n_classes", "it is unsupervised"))),
    Recipe("text", "multiclass", ("rows", "vocab_size", "context"), _text_splits,
           (("features", "it has context features"), ("n_classes", "the classes of 'text' are its vocab_size"))),
    # wide hashed features, stored sparse
    Recipe("ctr", "binary", ("rows", "features"), _ctr_splits, (("n_classes", "it is binary: clicks"),)),
    Recipe("text-hashed", "multiclass", ("features", "n_classes"), _text_hashed_splits,
           (("rows", "it has one row per docstring of its modules"),)),
)}
assert all(set(recipe.takes) <= set(RecipeOptions.fields()) for recipe in RECIPES.values())
make_dataset.__doc__ = (make_dataset.__doc__ or "").replace("    {options}", options_doc(RecipeOptions))
