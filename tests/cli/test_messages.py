"""The command in its user's words: flags where the library names keywords, a path that holds
no dataset said so, sizes and counts as tables and ratios the way the docs define them."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from dasklbfgs._format import human_bytes
from dasklbfgs.cli.main import main
from dasklbfgs.data import make_dataset
from dasklbfgs.errors import ConfigurationError, DatasetExistsError
from dasklbfgs.models import Softmax
from dasklbfgs.models.persist import save_params


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A recipe's train/test folder, as ``dasklbfgs data make`` writes it."""
    root = tmp_path_factory.mktemp("messages") / "mn"
    make_dataset("multinomial", root, rows=300, features=3, n_classes=3, shard_rows=100, seed=0)
    return root


def error_of(capsys, *argv: str) -> str:
    """The one line ``dasklbfgs ARGV`` prints on stderr, checking its exit code 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize(("argv", "message"), [
    (["data", "make", "logistic", "{tmp}/d", "--rows", "10"],
     "dasklbfgs: error: the 'logistic' recipe needs --rows and --features"),
    (["data", "make", "acoustic", "{tmp}/d"], "dasklbfgs: error: the 'acoustic' recipe needs --rows"),
    (["data", "make", "logistic", "{tmp}/d", "--rows", "10", "--features", "2", "--shard-rows", "0"],
     "dasklbfgs: error: make_dataset option --shard-rows must be an integer >= 1, got 0"),
    (["data", "make", "multinomial", "{folder}", "--rows", "30", "--features", "2"],
     "dasklbfgs: error: '{folder}' already exists; pass --overwrite to replace it"),
    (["train", "--data", "{folder}/train", "--workers", "0", "--output", "{tmp}/m.npz"],
     "dasklbfgs: error: --workers must be >= 1, got 0"),
    (["train", "--data", "{folder}/train", "--resume"],
     "dasklbfgs: error: sandblaster: --resume needs --checkpoint-path"),
    (["train", "--data", "{folder}/train", "--state", "local", "--param-shards", "2"],
     "dasklbfgs: error: sandblaster option --n-param-shards applies to --state sharded (L-BFGS vectors on "
     "parameter-shard actors), got --n-param-shards 2 with --state local"),
    (["train", "--data", "{folder}/train", "--solver", "downpour", "--overlap", "--sparse"],
     "dasklbfgs: error: downpour: --overlap needs dense transfer: a row-sparse fetch must arrive before the batch "
     "that reads its rows; pass --no-sparse"),
    (["train", "--data", "{folder}/train", "--solver", "downpour", "--checkpoint-every", "3"],
     "dasklbfgs: error: downpour: --checkpoint-every needs --checkpoint-path"),
    (["train", "--data", "{folder}/train", "--model", "mlp", "--embed-dim", "4"],
     "dasklbfgs: error: model 'mlp' does not take option(s) ['--embed-dim']; it takes ['--hidden', '--activation']"),
])
def test_errors_name_the_flags(capsys, tmp_path, folder, argv, message) -> None:
    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{folder}", str(folder))

    assert error_of(capsys, *map(filled, argv)) == filled(message)
    assert not (tmp_path / "d").exists() and not (tmp_path / "m.npz").exists()


def test_the_python_api_keeps_the_keywords(tmp_path, folder) -> None:
    with pytest.raises(ConfigurationError, match=r"^the 'logistic' recipe needs rows and features$"):
        make_dataset("logistic", tmp_path / "d", rows=10)
    with pytest.raises(DatasetExistsError, match=r"already exists; pass overwrite=True to replace it$"):
        make_dataset("multinomial", folder, rows=30, features=2)


@pytest.mark.parametrize("command", [["info"], ["train", "--data"], ["evaluate", "--params", "{tmp}/m.npz", "--data"],
                                     ["predict", "--params", "{tmp}/m.npz", "--output", "{tmp}/p", "--data"]])
def test_a_path_without_a_dataset_is_said_to_hold_none(capsys, tmp_path, command) -> None:
    save_params(tmp_path / "m.npz", Softmax(3, 3), np.zeros(12))
    command = [part.replace("{tmp}", str(tmp_path)) for part in command]
    (tmp_path / "notes").mkdir()
    zarr.create_group(store=str(tmp_path / "notes" / "scratch"), zarr_format=3)  # a Zarr group, not a dataset
    assert error_of(capsys, *command, str(tmp_path / "notes")) == (
        f"dasklbfgs: error: no dataset at '{tmp_path / 'notes'}': it is a folder without a zarr.json; a dataset is a "
        "Zarr (format 3) group of X and y arrays chunked by rows: write one with ShardedDataset.create or "
        "make_dataset, or 'dasklbfgs data make' or 'dasklbfgs data import'")


def test_a_train_test_folder_given_to_train_points_at_its_train_split(capsys, folder) -> None:
    assert error_of(capsys, "train", "--data", str(folder)) == (
        f"dasklbfgs: error: '{folder}' holds the datasets ['test', 'train'], not one dataset; open one of them, "
        f"e.g. '{folder / 'train'}'")


def test_info_gives_the_size_ratio_as_stored_over_raw(capsys, folder) -> None:
    from dasklbfgs import ShardedDataset

    train = ShardedDataset.open(folder / "train")
    raw = 300 * 3 * 8 + 300 * 8  # X and y in float64 (what nbytes_in_memory counts)
    stored = train.nbytes_stored()
    assert train.nbytes_in_memory == raw
    assert main(["info", str(folder / "train")]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("size"))
    assert line == f"size      {human_bytes(stored)} stored of 9.4 KiB raw (stored/raw {stored / raw:.2f})"


def test_downpour_staleness_is_a_table(capsys, client, folder, tmp_path) -> None:
    from dasklbfgs.models.persist import load_params

    argv = ["train", "--data", str(folder / "train"), "--solver", "downpour", "--replicas", "2", "--batch-size", "20",
            "--epochs", "1", "--scheduler", client.scheduler.address, "--output", str(tmp_path / "m.npz")]
    assert main(argv) in (0, 1)
    out = capsys.readouterr().out.splitlines()
    staleness = load_params(tmp_path / "m.npz")[2]["staleness"]  # the saved report's counts, by lag
    start = out.index("staleness  updates behind  pushes")
    lines = out[start + 1:start + 1 + len(staleness)]
    assert {lag: int(pushes) for lag, pushes in map(str.split, lines)} == {str(k): n for k, n in staleness.items()}
    assert all(line.startswith(" " * 11) and len(line) == len(out[start]) for line in lines)  # aligned
    assert not any("{" in line for line in out)  # no Python dict
