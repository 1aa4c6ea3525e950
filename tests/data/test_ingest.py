"""Tables and svmlight files into datasets, by the workers: equal to scikit-learn's own
encoders and parser on the same rows, with the choices recorded in the schema."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_svmlight_file, load_svmlight_files
from sklearn.feature_extraction import FeatureHasher

from dasklbfgs import ShardedDataset
from dasklbfgs.data.frame_features import MAX_INTEGER_CLASSES
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.models.registry import default_model
from tests._tables import one_hot, table


def test_a_parquet_table_with_text_columns_is_one_hot_encoded_as_scikit_learn_does(client, tmp_path) -> None:
    df = table()
    df.to_parquet(tmp_path / "table.parquet", row_group_size=200)
    frame = dd.read_parquet(tmp_path / "table.parquet", split_row_groups=True)
    data = ShardedDataset.from_dataframe(tmp_path / "data", frame, label="label", weight="w",
                                         features=["age", "income", "member", "city"], shard_rows=128, client=client)
    X, y = data.load_rows(0, data.n_samples)
    expected = np.column_stack([df.age, df.income, df.member.astype(float), one_hot(df)])
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(y, (df.label == "yes").astype(np.int64))
    np.testing.assert_array_equal(data.load_weights(0, data.n_samples), df.w)
    assert data.feature_names == ["age", "income", "member", "city=oslo", "city=paris", "city=rome"]
    assert data.label_counts == {0: int((df.label == "no").sum()), 1: int((df.label == "yes").sum())}
    recorded = data.frame_features
    assert recorded is not None and recorded.classes == ("no", "yes")
    new = pd.DataFrame({"age": [30], "income": [1.5], "member": [True], "city": ["lima"], "label": ["yes"],
                        "w": [1.0]})
    np.testing.assert_array_equal(recorded.features(new), [[30, 1.5, 1, 0, 0, 0]])  # unseen level: no column


def test_many_levels_and_crosses_are_hashed_as_feature_hasher_does(client, tmp_path) -> None:
    df = table(seed=1)
    data = ShardedDataset.from_dataframe(
        tmp_path / "hashed", dd.from_pandas(df, npartitions=5), label="label", features=["age", "city", "user"],
        hash_features=2**10, crosses=[("city", "user")], one_hot_max_levels=10, shard_rows=200, client=client)
    rows = [[f"user={u}"] + ([f"city={c}^user={u}"] if isinstance(c, str) else [])
            for c, u in zip(df.city, df.user)]
    hashed = FeatureHasher(2**10, input_type="string").transform(rows)
    expected = sp.hstack([sp.csr_array(df[["age"]].to_numpy(float)), sp.csr_array(one_hot(df)), hashed])
    X, _ = data.load_rows(0, data.n_samples)
    assert data.is_sparse and data.n_features == 4 + 2**10 and data.feature_names is None
    np.testing.assert_array_equal(X.toarray(), expected.toarray())
    assert data.frame_features.hashed == ("user",) and data.frame_features.crosses == (("city", "user"),)


def test_a_csv_table_on_s3_is_read_by_the_workers(client, tmp_path, s3) -> None:
    bucket, options = s3
    df = table(400, seed=2)[["age", "income", "city", "w"]].assign(label=lambda t: t.age > 50)
    csv = f"{bucket}/tables-{uuid.uuid4().hex[:6]}/part.csv"
    df.to_csv(csv, index=False, storage_options=options)
    data = ShardedDataset.from_dataframe(tmp_path / "csv", dd.read_csv(csv, storage_options=options, blocksize=4000),
                                         label="label", features=["age", "income", "city"], shard_rows=64,
                                         client=client)
    X, y = data.load_rows(0, 400)
    np.testing.assert_allclose(X, np.column_stack([df.age, df.income, one_hot(df)]), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(y, df.label.astype(np.int64))


def test_bad_tables_are_refused_naming_the_column(client, tmp_path) -> None:
    df = table(200, seed=3)
    frame = dd.from_pandas(df, npartitions=2)
    with pytest.raises(InvalidDataError, match=r"no column\(s\) \['price'\]"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="price", shard_rows=50, client=client)
    with pytest.raises(InvalidDataError, match="column 'user' has more than 32 levels: hash it"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="label", shard_rows=50, client=client)
    with pytest.raises(ConfigurationError, match="crosses .* are hashed: give hash_features"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="label", features=["age"],
                                      crosses=[("city", "user")], shard_rows=50, client=client)
    with pytest.raises(ConfigurationError, match="hash_features must be a positive integer, got 0"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="label", hash_features=0, shard_rows=50,
                                      client=client)
    dated = df.assign(when=pd.Timestamp("2026-01-01"))
    with pytest.raises(InvalidDataError, match="column 'when' holds datetime64.*neither numbers nor text"):
        ShardedDataset.from_dataframe(tmp_path / "a", dd.from_pandas(dated, npartitions=2), label="label",
                                      features=["age", "when"], shard_rows=50, client=client)
    with pytest.raises(ConfigurationError, match="one_hot_max_levels must be a non-negative integer, got -1"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="label", one_hot_max_levels=-1, shard_rows=50,
                                      client=client)
    many = pd.concat([df] * 8, ignore_index=True).assign(label=[f"name-{i}" for i in range(1600)])
    with pytest.raises(InvalidDataError, match="label column 'label' holds text with more than 1000 distinct"):
        ShardedDataset.from_dataframe(tmp_path / "a", dd.from_pandas(many, npartitions=2), label="label",
                                      features=["age"], shard_rows=50, client=client)
    holes = df.assign(income=df.income.where(df.index != 137))
    with pytest.raises(InvalidDataError, match="column 'income' has a missing value at row 137"):
        ShardedDataset.from_dataframe(tmp_path / "a", holes, label="label", features=["age", "income"],
                                      shard_rows=50, client=client)
    assert list(tmp_path.iterdir()) == []


def _labelled(n: int = 240, seed: int = 6) -> pd.DataFrame:
    """Two features and one label column of each kind: text, class indices 0..2, integers 1..3,
    -1/+1, booleans, floats, integers of more levels than classes have, and counts."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    return pd.DataFrame({"a": a, "b": b, "text": np.where(a > 0, "yes", "no"),
                         "level": np.digitize(a, [-0.5, 0.5]), "stars": np.digitize(a, [-0.5, 0.5]) + 1,
                         "sign": np.where(b > 0, 1, -1), "flag": a > 0,
                         "value": 2 * a - b, "many": np.arange(n) % (MAX_INTEGER_CLASSES + 5),
                         "claims": rng.poisson(np.exp(0.3 * a))})


@pytest.mark.parametrize("label, task, recorded, model, y", [
    ("text", None, {"task": "binary", "n_classes": 2, "classes": ["no", "yes"]}, "logistic",
     lambda df: (df.text == "yes").astype(int)),
    ("level", None, {"task": "multiclass", "n_classes": 3, "classes": ["0", "1", "2"]}, "softmax",
     lambda df: df.level),
    ("flag", None, {"task": "binary", "n_classes": 2, "classes": ["False", "True"]}, "logistic",
     lambda df: df.flag.astype(int)),
    ("value", None, {"task": "regression"}, "least_squares", lambda df: df.value),
    ("many", None, {"task": "regression"}, "least_squares", lambda df: df.many),
    ("claims", "counts", {"task": "counts"}, "poisson", lambda df: df.claims),
    ("stars", "regression", {"task": "regression"}, "least_squares", lambda df: df.stars),
    ("level", "classification", {"task": "multiclass", "n_classes": 3, "classes": ["0", "1", "2"]}, "softmax",
     lambda df: df.level),
    # numbers that are not class indices: classes or numbers, the user says (nothing recorded, nothing re-encoded)
    ("stars", None, {}, None, lambda df: df.stars),
    ("sign", None, {}, None, lambda df: df.sign),
])
def test_a_table_s_labels_record_their_task_and_classes_as_the_recipes_do(client, tmp_path, label, task, recorded,
                                                                         model, y) -> None:
    """Text labels (0..K-1, named) and integers that are class indices are classes; floats and
    many integers are numbers; ``task`` decides otherwise. ``train`` chooses its model by it."""
    df = _labelled()
    data = ShardedDataset.from_dataframe(tmp_path / "d", dd.from_pandas(df, npartitions=3), label=label,
                                         features=["a", "b"], shard_rows=100, client=client, task=task)
    assert {key: data.attrs[key] for key in recorded} == recorded
    assert not {"task", "n_classes", "classes"} & set(data.attrs) - set(recorded)
    if model is None:
        with pytest.raises(ConfigurationError, match="records no task"):
            default_model(data)
    else:
        assert default_model(data) == model
    np.testing.assert_array_equal(data.load_labels(0, data.n_samples), y(df))
    if "classes" in recorded:
        assert data.classes == recorded["classes"] and set(data.label_counts) == set(range(data.attrs["n_classes"]))
    elif task is None:
        assert data.classes is None and "n_classes" not in data.attrs


def test_labels_that_do_not_fit_the_task_are_refused_naming_them(client, tmp_path) -> None:
    df = _labelled()
    frame = dd.from_pandas(df, npartitions=2)
    for task, match in [("regression", r"task='regression' fits numbers, but label column 'text' holds text: give "
                                       r"numeric labels, or task='classification'"),
                        ("bogus", r"task must be one of \['classification', 'binary', 'multiclass', 'regression', "
                                  r"'counts', 'amounts'\], or None to decide by the labels, got 'bogus'")]:
        with pytest.raises(ConfigurationError, match=match):
            ShardedDataset.from_dataframe(tmp_path / "a", frame, label="text", features=["a"], shard_rows=50,
                                          client=client, task=task)
    with pytest.raises(ConfigurationError, match=r"task='binary' takes two classes, but label column 'level' holds "
                                                 r"3: \['0', '1', '2'\]; use task='multiclass'"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="level", features=["a"], shard_rows=50,
                                      client=client, task="binary")
    with pytest.raises(ConfigurationError, match=r"task='classification' takes class indices 0..K-1 as labels, but "
                                                 r"label column 'sign' holds -1: map its values to 0..K-1 first"):
        ShardedDataset.from_dataframe(tmp_path / "a", frame, label="sign", features=["a"], shard_rows=50,
                                      client=client, task="classification")
    wide = pd.DataFrame({"a": np.arange(1200.0), "y": np.arange(1200) * 0.5})
    with pytest.raises(InvalidDataError, match=r"label column 'y' holds numbers of more than 1000 distinct values: "
                                               r"too many classes"):
        ShardedDataset.from_dataframe(tmp_path / "a", wide, label="y", shard_rows=500, client=client,
                                      task="classification")
    assert list(tmp_path.iterdir()) == []


def test_a_held_out_table_written_apart_gives_each_class_the_same_number(client, tmp_path) -> None:
    """Numbers are never re-encoded: a held-out split that lacks a class, or holds only one,
    keeps the training split's numbering (its recorded task follows what it holds)."""
    df = _labelled()
    train = ShardedDataset.from_dataframe(tmp_path / "train", df, label="level", features=["a", "b"],
                                          shard_rows=100, client=client)
    for name, rows in [("no-zeros", df[df.level > 0]), ("twos", df[df.level == 2])]:
        held_out = ShardedDataset.from_dataframe(tmp_path / name, rows, label="level", features=["a", "b"],
                                                 shard_rows=100, client=client, task="classification")
        np.testing.assert_array_equal(held_out.load_labels(0, held_out.n_samples), rows.level)
        assert held_out.attrs["n_classes"] == 3 == train.attrs["n_classes"]
def test_svmlight_files_in_byte_ranges_equal_scikit_learns_reading(client, tmp_path) -> None:
    rng = np.random.default_rng(4)
    X = sp.random(3000, 200, density=0.05, format="csr", random_state=4)
    y = rng.integers(0, 2, 3000) * 2.0 - 1
    dump_svmlight_file(X[:1800], y[:1800], str(tmp_path / "part-a.svm"), zero_based=False)
    dump_svmlight_file(X[1800:], y[1800:], str(tmp_path / "part-b.svm"), zero_based=False)
    data = ShardedDataset.from_svmlight(tmp_path / "data", str(tmp_path / "part-*.svm"), shard_rows=512,
                                        block_bytes=20_000, client=client)
    Xa, ya, Xb, yb = load_svmlight_files([str(tmp_path / "part-a.svm"), str(tmp_path / "part-b.svm")])
    rows, labels = data.load_rows(0, data.n_samples)
    assert data.is_sparse and data.shard_rows == 512 and (data.n_samples, data.n_features) == (3000, Xa.shape[1])
    assert (rows != sp.vstack([Xa, Xb])).nnz == 0
    np.testing.assert_array_equal(labels, np.concatenate([ya, yb]))
    zero = tmp_path / "zero.svm"
    dump_svmlight_file(X[:500], y[:500], str(zero), zero_based=True)
    again = ShardedDataset.from_svmlight(tmp_path / "zero", str(zero), shard_rows=100, block_bytes=5_000,
                                         client=client)
    expected, _ = load_svmlight_file(str(zero))
    assert again.n_features == expected.shape[1] and (again.load_rows(0, 500)[0] != expected).nnz == 0


def test_bad_svmlight_input_is_refused_naming_the_file(client, tmp_path) -> None:
    (tmp_path / "bad.svm").write_text("1 3:1.0 2:0.5\n")
    with pytest.raises(InvalidDataError, match="bad.svm' is not a valid svmlight file: .*sorted and unique"):
        ShardedDataset.from_svmlight(tmp_path / "a", str(tmp_path / "bad.svm"), shard_rows=10, client=client)
    with pytest.raises(InvalidDataError, match="no svmlight file matches"):
        ShardedDataset.from_svmlight(tmp_path / "a", str(tmp_path / "none-*.svm"), shard_rows=10, client=client)
    (tmp_path / "ok.svm").write_text("1 1:1.0 7:0.5\n0 2:1.0\n")
    with pytest.raises(InvalidDataError, match="n_features is 3 but the files hold 7 columns"):
        ShardedDataset.from_svmlight(tmp_path / "a", str(tmp_path / "ok.svm"), n_features=3, shard_rows=10,
                                     client=client)
    with pytest.raises(InvalidDataError, match=r"zero_based=False but '.*zero.svm' holds column index 0"):
        (tmp_path / "zero.svm").write_text("1 0:1.0 7:0.5\n")
        ShardedDataset.from_svmlight(tmp_path / "a", [str(tmp_path / "ok.svm"), str(tmp_path / "zero.svm")],
                                     zero_based=False, shard_rows=10, client=client)
    with pytest.raises(InvalidDataError, match=r"no svmlight file at '.*missing.svm'"):
        ShardedDataset.from_svmlight(tmp_path / "a", str(tmp_path / "missing.svm"), shard_rows=10, client=client)
    for option, match in [({"zero_based": "yes"}, "zero_based must be True, False or 'auto', got 'yes'"),
                          ({"block_bytes": 0}, "block_bytes must be a positive integer, got 0")]:
        with pytest.raises(ConfigurationError, match=match):
            ShardedDataset.from_svmlight(tmp_path / "a", str(tmp_path / "ok.svm"), shard_rows=10, client=client,
                                         **option)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.svm", "ok.svm", "zero.svm"]


def _import(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dasklbfgs.cli", "data", "import", *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_the_command_line_imports_parquet_on_s3_and_svmlight_with_the_running_cluster(client, tmp_path, s3) -> None:
    bucket, options = s3
    df = table(300, seed=5)
    df["log_exposure"] = np.log(np.linspace(0.5, 2.0, 300))
    source = f"{bucket}/tables-{uuid.uuid4().hex[:6]}"
    df.to_parquet(f"{source}/part-0.parquet", storage_options=options)
    dest = f"{bucket}/imported-{uuid.uuid4().hex[:6]}.zarr"
    flags = [f"--storage-option={key}={value}" for key, value in (
        ("key", "k"), ("secret", "s"), ("client_kwargs.endpoint_url", options["client_kwargs"]["endpoint_url"]))]
    done = _import(f"{source}/*.parquet", dest, "--label", "label", "--weight", "w", "--offset", "log_exposure",
                   "--features", "age,city,user",
                   "--hash-features", "2**8", "--cross", "city,user", "--one-hot-max-levels", "8", "--shard-rows",
                   "100", "--scheduler", client.scheduler.address, *flags)
    assert done.returncode == 0, done.stderr
    data = ShardedDataset.open(dest, storage_options=options)
    assert (data.n_samples, data.n_features, data.n_shards) == (300, 1 + 3 + 2**8, 3) and data.is_sparse
    assert data.frame_features.crosses == (("city", "user"),) and "300" in done.stdout
    np.testing.assert_array_equal(data.load_weights(0, 300), df.w)
    np.testing.assert_array_equal(data.load_offsets(0, 300), df.log_exposure)

    X = sp.random(200, 30, density=0.1, format="csr", random_state=5)
    dump_svmlight_file(X, np.arange(200) % 2, str(tmp_path / "rows.svm"), zero_based=False)
    done = _import(str(tmp_path / "rows.svm"), str(tmp_path / "svm"), "--shard-rows", "64", "--quiet",
                   "--scheduler", client.scheduler.address)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert (ShardedDataset.open(tmp_path / "svm").load_rows(0, 200)[0] != load_svmlight_file(
        str(tmp_path / "rows.svm"))[0]).nnz == 0


def test_an_imported_table_trains_without_naming_the_model(client, tmp_path, capsys) -> None:
    """The summary names the classes; ``dasklbfgs train`` on the import picks the model its
    task implies; ``--task`` chooses another, and one the labels do not fit is refused."""
    from dasklbfgs.cli.data_import import NO_TASK
    from dasklbfgs.cli.main import main
    from dasklbfgs.models.persist import load_params

    df = _labelled()
    df.to_csv(tmp_path / "rows.csv", index=False)
    scheduler = ["--scheduler", client.scheduler.address]
    done = _import(str(tmp_path / "rows.csv"), str(tmp_path / "d"), "--label", "text", "--features", "a,b",
                   "--shard-rows", "100", *scheduler)
    assert done.returncode == 0, done.stderr
    n_no, n_yes = int((df.text == "no").sum()), int((df.text == "yes").sum())
    assert f"labels    2 distinct: no: {n_no} ({100 * n_no / 240:.1f}%), yes: {n_yes} " in done.stdout
    assert main(["train", "--data", str(tmp_path / "d"), "--output", str(tmp_path / "m.npz"), *scheduler]) == 0
    assert capsys.readouterr().out.startswith("model      Logistic(n_features=2,")
    assert type(load_params(tmp_path / "m.npz")[0]).__name__ == "Logistic"

    assert main(["data", "import", str(tmp_path / "rows.csv"), str(tmp_path / "c"), "--label", "claims", "--features",
                 "a,b", "--task", "counts", "--quiet", *scheduler]) == 0
    assert ShardedDataset.open(tmp_path / "c").attrs["task"] == "counts"
    capsys.readouterr()
    assert main(["data", "import", str(tmp_path / "rows.csv"), str(tmp_path / "s"), "--label", "sign", "--features",
                 "a,b", *scheduler]) == 0  # -1 and 1: the summary says to choose
    assert capsys.readouterr().out.rstrip().endswith(NO_TASK)
    assert "task" not in ShardedDataset.open(tmp_path / "s").attrs
    assert main(["data", "import", str(tmp_path / "rows.csv"), str(tmp_path / "r"), "--label", "text", "--task",
                 "regression", *scheduler]) == 2
    assert capsys.readouterr().err == ("dasklbfgs: error: --task regression fits numbers, but label column 'text' "
                                       "holds text: give numeric labels, or --task classification to fit its "
                                       "values as classes\n")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, match", [
    (["rows.dat", "out"], r"cannot tell the format of 'rows.dat' from its name; pass --format"),
    (["r.svm", "out", "--task", "regression"], "svmlight files take no --task"),
    (["t.parquet", "out"], "--label is required for parquet files"),
    (["r.svm", "out", "--label", "y"], "svmlight files take no --label"),
    (["r.svm", "out", "--offset", "e"], "svmlight files take no --offset"),
    (["t.csv", "out", "--label", "y", "--cross", "a"], r"--cross takes two columns as COL,COL, got 'a'"),
])
def test_import_flags_that_do_not_fit_are_refused(args, match) -> None:
    from dasklbfgs.cli.main import build_parser, main

    parsed = build_parser().parse_args(["data", "import", *args])
    with pytest.raises(ConfigurationError, match=match):
        parsed.func(parsed)  # before any cluster starts
    assert main(["data", "import", *args]) == 2


def test_a_hash_width_that_is_not_a_number_is_refused_by_the_parser(capsys) -> None:
    from dasklbfgs.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["data", "import", "t.csv", "out", "--label", "y", "--hash-features", "lots"])
    assert stopped.value.code == 2
    assert "expected an integer or a power such as 2**22, got 'lots'" in capsys.readouterr().err
