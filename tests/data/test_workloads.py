"""Workload recipes shaped like the DistBelief applications: speech frames, image patches, text."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset, make_dataset
from dasklbfgs.cli import main as cli_main
from dasklbfgs.data._stdlib_text import stdlib_docstrings, tokenize
from dasklbfgs.data.recipes import RECIPES
from dasklbfgs.data.workloads import AcousticFrames, DocstringCorpus, ImagePatches
from dasklbfgs.errors import ConfigurationError


def _all_rows(ds: ShardedDataset) -> tuple[np.ndarray, np.ndarray]:
    return ds.load_rows(0, ds.n_samples)


@pytest.fixture(scope="module")
def acoustic(tmp_path_factory) -> dict[str, ShardedDataset]:
    path = tmp_path_factory.mktemp("acoustic") / "d"
    return make_dataset("acoustic", path, rows=5000, shard_rows=1500, seed=4)


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> dict[str, ShardedDataset]:
    return make_dataset("text", tmp_path_factory.mktemp("text") / "d", shard_rows=20_000, seed=1)


def test_the_cli_offers_every_recipe() -> None:
    assert {"acoustic", "patches", "text", "multinomial", "digits"} <= set(RECIPES)


# -- acoustic --------------------------------------------------------------------------------


def test_acoustic_shapes_dtypes_and_attrs(acoustic) -> None:
    train, test = acoustic["train"], acoustic["test"]
    assert (train.n_samples, train.n_features, train.n_shards, test.n_samples) == (5000, 440, 4, 1000)
    X, y = _all_rows(train)
    assert X.dtype == np.float32 and y.dtype == np.int64
    assert {k: train.attrs[k] for k in ("task", "n_classes", "source", "frames", "bands", "seed")} == {
        "task": "multiclass", "n_classes": 128, "source": "synthetic:acoustic",
        "frames": 11, "bands": 40, "seed": 4,
    }
    assert train.feature_names[0] == "t-5_band00" and train.feature_names[-1] == "t+5_band39"
    # Test rows are fresh draws, not copies of training rows.
    assert not np.isin(_all_rows(test)[0][:, 0], X[:, 0]).any()


def test_acoustic_labels_use_many_classes_and_none_dominates(acoustic) -> None:
    _, y = _all_rows(acoustic["train"])
    counts = np.bincount(y, minlength=128)
    assert len(counts) == 128
    assert (counts > 0).sum() >= 64
    assert counts.max() / len(y) < 0.2


def test_acoustic_frames_are_correlated_in_time(acoustic) -> None:
    X, _ = _all_rows(acoustic["train"])
    frames = X.reshape(-1, 11, 40)
    for band in (0, 17, 39):
        neighbours = np.corrcoef(frames[:, 5, band], frames[:, 6, band])[0, 1]
        distant = np.corrcoef(frames[:, 0, band], frames[:, 10, band])[0, 1]
        assert neighbours > 0.5 and distant < neighbours - 0.1


def test_acoustic_data_depends_on_the_seed_not_the_shard_size(tmp_path, acoustic) -> None:
    X, y = _all_rows(acoustic["train"])
    again = make_dataset("acoustic", tmp_path / "a", rows=5000, shard_rows=5000, seed=4, test_fraction=0)
    X2, y2 = _all_rows(again["train"])
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    other = make_dataset("acoustic", tmp_path / "b", rows=50, shard_rows=50, seed=5, test_fraction=0)
    assert not np.array_equal(_all_rows(other["train"])[0], X[:50])


def test_acoustic_teacher_is_fixed_by_the_seed() -> None:
    X, y = next(AcousticFrames(n_classes=16, seed=2).blocks(2000))
    np.testing.assert_array_equal(AcousticFrames(n_classes=16, seed=2).labels(X), y)
    assert not np.array_equal(AcousticFrames(n_classes=16, seed=3).labels(X), y)
    assert len(np.unique(y)) == 16


def test_n_classes_defaults_per_recipe(tmp_path) -> None:
    small = make_dataset("acoustic", tmp_path / "a", rows=300, n_classes=5, test_fraction=0)["train"]
    assert small.attrs["n_classes"] == 5 and set(small.label_counts) == {0, 1, 2, 3, 4}
    multinomial = make_dataset("multinomial", tmp_path / "m", rows=300, features=3, test_fraction=0)
    assert multinomial["train"].attrs["n_classes"] == 3


# -- patches ---------------------------------------------------------------------------------


def test_digit_patches(tmp_path) -> None:
    splits = make_dataset("patches", tmp_path / "p", image_source="digits", shard_rows=4000, seed=2)
    train, test = splits["train"], splits["test"]
    assert (train.n_samples, train.n_features, test.n_samples) == (10_000, 36, 2000)
    X, y = _all_rows(train)
    assert X.dtype == np.float32 and X.min() >= 0.1 and X.max() <= 0.9
    assert X.std() > 0.01
    assert y.shape == (10_000,) and not y.any()
    assert {k: train.attrs[k] for k in ("task", "patch_size", "source")} == {
        "task": "unsupervised", "patch_size": 6, "source": "digits",
    }


def test_digit_test_patches_come_from_held_out_images() -> None:
    patches = ImagePatches(patch_size=8, source="digits", seed=0, held_out_fraction=0.25)
    train_images, test_images = patches._digit_pools
    assert len(train_images) + len(test_images) == 1797
    X_train, _ = next(patches.blocks(500))
    X_test, _ = next(patches.blocks(200, first_block=1_000_000, held_out=True))
    # Whole 8x8 images: every training patch is a scaled training image, none a test one.
    assert not (X_test[:, None, :] == X_train[None, :, :]).all(axis=2).any()


def test_synthetic_patches_are_smooth_and_reproducible(tmp_path) -> None:
    a = make_dataset("patches", tmp_path / "a", rows=3000, patch_size=8, shard_rows=700, seed=3)
    X, _ = _all_rows(a["train"])
    assert X.shape == (3000, 64) and a["test"].n_samples == 600
    assert X.min() >= 0.1 and X.max() <= 0.9 and X.std() > 0.05
    images = X.reshape(-1, 8, 8)
    # Smooth: horizontal neighbours are strongly correlated.
    assert np.corrcoef(images[:, :, 3].ravel(), images[:, :, 4].ravel())[0, 1] > 0.7
    b = make_dataset("patches", tmp_path / "b", rows=3000, patch_size=8, shard_rows=3000, seed=3)
    np.testing.assert_array_equal(_all_rows(b["train"])[0], X)


# -- text ------------------------------------------------------------------------------------


def test_text_pairs_shapes_dtypes_and_attrs(text) -> None:
    train, test = text["train"], text["test"]
    X, y = _all_rows(train)
    assert train.n_features == 3 and train.dtype == np.int32
    assert X.dtype == np.int32 and y.dtype == np.int64
    assert train.n_samples > 20_000 and test.n_samples > 4000
    vocabulary = train.attrs["vocabulary"]
    assert len(vocabulary) == 2000 and vocabulary[:2] == ["<unk>", "<s>"]
    assert len(set(vocabulary)) == 2000
    assert {k: train.attrs[k] for k in ("task", "n_classes", "vocab_size", "context", "source")} == {
        "task": "multiclass", "n_classes": 2000, "vocab_size": 2000, "context": 3,
        "source": "stdlib-docstrings",
    }
    assert train.attrs["python_version"].count(".") == 2
    assert train.feature_names == ["w-3", "w-2", "w-1"]
    for ids in (X, y):
        assert ids.min() >= 0 and ids.max() < 2000
    assert np.mean(y == 0) < 0.06  # <unk> on the words the vocabulary was built from
    assert np.mean(_all_rows(test)[1] == 0) < 0.15


def test_text_pairs_decode_to_the_corpus(text) -> None:
    X, y = _all_rows(text["train"])
    vocabulary = text["train"].attrs["vocabulary"]
    # Every docstring opens with a context of <s> padding; each context is the shifted
    # previous one plus the previous target.
    starts = np.flatnonzero((X == 1).all(axis=1))
    assert len(starts) == text["train"].attrs["docstrings"]
    first, stop = starts[0], starts[1]
    words = [vocabulary[i] for i in y[first:stop]]
    assert words[-1] == "<s>"
    np.testing.assert_array_equal(X[first + 1 : stop, -1], y[first : stop - 1])
    known = set(vocabulary)
    docs = {tuple(w if w in known else "<unk>" for w in tokenize(d)) for d in stdlib_docstrings()}
    assert tuple(words) in docs


def test_text_split_shares_no_docstring() -> None:
    corpus = DocstringCorpus(vocab_size=100, context=2, test_fraction=0.25)
    train, test = corpus._tokenized
    assert len(test) == pytest.approx(0.25 * (len(train) + len(test)), abs=1)
    assert not {tuple(d) for d in train} & {tuple(d) for d in test}
    # The vocabulary is the training split's: a word seen only in test docstrings is <unk>.
    assert set(corpus.vocabulary[2:]) <= {w for d in train for w in d}


def test_text_rows_cap_and_determinism(tmp_path, text) -> None:
    capped = make_dataset("text", tmp_path / "c", rows=5000, shard_rows=1000, seed=1)
    X, y = _all_rows(capped["train"])
    assert capped["train"].n_samples == 5000 and capped["test"].n_samples == 1000
    X_full, y_full = _all_rows(text["train"])
    np.testing.assert_array_equal(X, X_full[:5000])
    np.testing.assert_array_equal(y, y_full[:5000])
    shuffled = make_dataset("text", tmp_path / "d", rows=5000, shard_rows=5000, seed=2, test_fraction=0)
    assert not np.array_equal(_all_rows(shuffled["train"])[1], y)


def test_text_context_and_vocabulary_size(tmp_path) -> None:
    splits = make_dataset("text", tmp_path / "t", rows=2000, vocab_size=50, context=1, test_fraction=0)
    train = splits["train"]
    X, y = _all_rows(train)
    assert X.shape == (2000, 1) and y.max() < 50 and train.attrs["n_classes"] == 50
    assert train.attrs["vocabulary"][2] == "the"


def test_cli_passes_the_workload_options(tmp_path, capsys) -> None:
    assert cli_main(["data", "make", "text", str(tmp_path / "t"), "--rows", "800", "--vocab", "40",
                     "--context", "2", "--shard-rows", "400", "--quiet"]) == 0
    train = ShardedDataset.open(tmp_path / "t" / "train")
    assert (train.n_samples, train.n_features, train.attrs["vocab_size"]) == (800, 2, 40)
    assert cli_main(["data", "make", "patches", str(tmp_path / "p"), "--image-source", "digits",
                     "--patch-size", "4", "--rows", "300", "--quiet"]) == 0
    assert ShardedDataset.open(tmp_path / "p" / "train").n_features == 16
    assert cli_main(["info", str(tmp_path / "t" / "train")]) == 0
    assert "vocabulary = ['<unk>', '<s>', 'the'" in capsys.readouterr().out


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [
        ("acoustic", {"rows": 10, "features": 100},
         r"the 'acoustic' recipe takes no features \(it has 440 features: 11 frames x 40 bands\), got 100"),
        ("acoustic", {}, r"the 'acoustic' recipe needs rows"),
        ("acoustic", {"rows": 10, "n_classes": 1}, r"n_classes must be an integer >= 2 or None, got 1"),
        ("acoustic", {"rows": 10, "ill_conditioned": True},
         r"the 'acoustic' recipe takes no ill_conditioned \(its options: rows, n_classes\), got True"),
        ("patches", {"rows": 10, "patch_size": 1}, r"patch_size must be an integer >= 2 or None, got 1"),
        ("patches", {"rows": 10, "patch_size": 2.5}, r"patch_size must be an integer >= 2 or None, got 2.5"),
        ("patches", {"image_source": "digits", "patch_size": 9},
         r"patch_size must be at most 8 for the 8x8 digits images, got 9"),
        ("patches", {"rows": 10, "image_source": "mnist"},
         r"image_source must be one of \('synthetic', 'digits'\) or None, got 'mnist'"),
        ("patches", {"patch_size": 4}, r"image_source='synthetic' needs rows"),
        ("patches", {"rows": 10, "features": 36}, r"takes no features \(it has patch_size\*\*2 features\), got 36"),
        ("patches", {"rows": 10, "n_classes": 4}, r"the 'patches' recipe takes no n_classes \(it is unsupervised\)"),
        ("text", {"vocab_size": 1}, r"vocab_size must be an integer >= 3 or None, got 1"),
        ("text", {"vocab_size": 10**6}, r"vocab_size must be at most \d+ .* got 1000000"),
        ("text", {"context": 0}, r"context must be an integer >= 1 or None, got 0"),
        ("text", {"rows": 0}, r"rows must be an integer >= 1 or None, got 0"),
        ("text", {"n_classes": 10},
         r"the 'text' recipe takes no n_classes \(the classes of 'text' are its vocab_size\)"),
        ("logistic", {"rows": 10, "features": 2, "vocab_size": 10},
         r"the 'logistic' recipe takes no vocab_size \(its options: rows, features, ill_conditioned\), got 10"),
        ("acoustic", {"rows": 10, "patch_size": 4}, r"the 'acoustic' recipe takes no patch_size"),
    ],
)
def test_workload_errors(tmp_path, kind, kwargs, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make_dataset(kind, tmp_path / "d", **kwargs)
    assert list(tmp_path.iterdir()) == []
