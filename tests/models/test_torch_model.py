"""TorchModel: a user's torch module trained by every solver, checked against torch itself
and finite differences, on real clusters (the session's two workers)."""

from __future__ import annotations

import json
import sys

import cloudpickle
import numpy as np
import pytest

from dasklbfgs import ShardedDataset, evaluate, minimize, predict
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError, PartitionError
from dasklbfgs.models.persist import load_params, save_params
from tests._torch import TORCH_TESTS, needs_torch, torch
from tests.models.test_neural import central_differences

pytestmark = needs_torch
cloudpickle.register_pickle_by_value(sys.modules[__name__])

if TORCH_TESTS:
    from torch import nn

    from dasklbfgs.models import TorchModel


def small_cnn() -> nn.Module:
    """A convolutional classifier of 8x8 images into 10 digits (a factory importable by path)."""
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict[str, ShardedDataset]:
    """scikit-learn's 1,797 8x8 digit images, scaled to [0, 1]: 1,497 to train, 300 held out."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    root = tmp_path_factory.mktemp("digits")
    return {"train": ShardedDataset.create(root / "train", X[:1497], y[:1497], shard_rows=300),
            "test": ShardedDataset.create(root / "test", X[1497:], y[1497:], shard_rows=300)}


def _rows(n: int = 40, features: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)), rng.uniform(0.5, 2.0, size=n)


def _double_mlp(outputs: int):
    return lambda: nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, outputs)).double()


LOSSES = {  # loss -> (outputs, labels of 40 rows, torch's mean loss of the outputs)
    "cross_entropy": (3, lambda rng: rng.integers(0, 3, 40).astype(float),
                      lambda out, y: nn.functional.cross_entropy(out, y.long(), reduction="none")),
    "bce_with_logits": (1, lambda rng: rng.integers(0, 2, 40).astype(float),
                        lambda out, y: nn.functional.binary_cross_entropy_with_logits(out[:, 0], y, reduction="none")),
    "mse": (1, lambda rng: rng.normal(size=40), lambda out, y: (out[:, 0] - y) ** 2),
    "poisson_nll": (1, lambda rng: rng.poisson(2.0, 40).astype(float),
                    lambda out, y: nn.functional.poisson_nll_loss(out[:, 0], y, reduction="none")),
}


@pytest.mark.parametrize("loss", [*LOSSES, "callable"])
def test_sums_over_any_split_add_up_to_torchs_objective_and_its_finite_differences(loss) -> None:
    outputs, labels, reference = LOSSES["mse" if loss == "callable" else loss]
    X, w = _rows()
    y = labels(np.random.default_rng(1))
    huber = lambda out, y: nn.functional.huber_loss(out[:, 0], y, reduction="none")  # noqa: E731
    model = (TorchModel(_double_mlp(outputs), loss=huber, task="regression", l2=0.1, block_rows=7)
             if loss == "callable" else TorchModel(_double_mlp(outputs), loss=loss, l2=0.1, block_rows=7))
    x = model.init_params(seed=3)
    f, grad = model.objective(x, X, y, w)
    # torch's own weighted mean of its per-row losses, plus the weight decay on the weight matrices
    module = model.to_module(x)
    rows = (huber if loss == "callable" else reference)(module(torch.as_tensor(X)), torch.as_tensor(y)).detach()
    weights = sum(float((p.detach() ** 2).sum()) for p in module.parameters() if p.dim() == 2)
    assert f == pytest.approx(float((rows * torch.as_tensor(w)).sum()) / w.sum() + 0.05 * weights, rel=1e-12)
    np.testing.assert_allclose(grad, central_differences(lambda p: model.objective(p, X, y, w)[0], x),
                               rtol=1e-6, atol=1e-8)
    # sums over a split of the rows (blocks of 7 inside each) add up to the whole's
    parts = [model.loss_grad_sum(x, X[a:b], y[a:b], w[a:b]) for a, b in ((0, 13), (13, 29), (29, 40))]
    whole = model.loss_grad_sum(x, X, y, w)
    assert sum(p[0] for p in parts) == pytest.approx(whole[0], rel=1e-13)
    np.testing.assert_allclose(sum(p[1] for p in parts), whole[1], rtol=1e-12, atol=1e-14)


def test_the_parameter_vector_is_torchs_and_a_float32_module_sums_in_float64() -> None:
    model = TorchModel(small_cnn, input_shape=(1, 8, 8), l2=1e-4)
    assert (model.n_features, model.n_classes, model.n_params) == (64, 10, 4 * 9 + 4 + 144 * 10 + 10)
    x = model.init_params(seed=5)
    torch.manual_seed(5)
    reference = small_cnn()
    np.testing.assert_array_equal(x, nn.utils.parameters_to_vector(reference.parameters()).detach().double().numpy())
    X = np.random.default_rng(2).uniform(size=(50, 64))
    out = model.to_module(x)(torch.as_tensor(X, dtype=torch.float32).reshape(50, 1, 8, 8))
    np.testing.assert_allclose(model.decision_function(x, X), out.detach().double().numpy(), rtol=1e-6)
    loss, grad = model.loss_grad_sum(x, X, np.zeros(50))
    assert isinstance(loss, float) and grad.dtype == np.float64
    double = TorchModel(_double_mlp(3))  # float64 parameters: the module must not share the vector's memory
    start = double.init_params(1)
    kept = start.copy()
    with torch.no_grad():
        for p in double.to_module(start).parameters():
            p.add_(1.0)
    double.loss_grad_sum(start, X[:, :6], np.zeros(50))
    np.testing.assert_array_equal(start, kept)
    assert model.predict_proba(x, X).shape == (50, 10)


def test_a_model_pickled_to_a_worker_builds_its_module_once_there_and_sums_the_same(client) -> None:
    model = TorchModel(small_cnn, input_shape=(1, 8, 8))
    x, X = model.init_params(), np.random.default_rng(2).uniform(size=(30, 64))
    y = np.arange(30) % 10

    def twice(model, x, X, y):
        first = model.loss_grad_sum(x, X, y)
        built = model._built()[0]  # this thread's
        second = model.loss_grad_sum(x, X, y)
        return first, second, model._built()[0] is built

    first, second, same_module = client.submit(twice, model, x, X, y, pure=False).result()
    here = model.loss_grad_sum(x, X, y)
    assert same_module and first[0] == second[0] == here[0]
    np.testing.assert_array_equal(first[1], here[1])
    # a module object travels without its weights (they come with every call): as small as a factory
    wide = TorchModel(nn.Sequential(nn.Flatten(), nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 10)))
    assert wide.n_params > 38_000 and len(cloudpickle.dumps(wide)) < 8_000
    x = wide.init_params(None)
    shipped = client.submit(lambda m, x, X, y: m.loss_grad_sum(x, X, y), wide, x, X, y, pure=False).result()
    assert shipped[0] == wide.loss_grad_sum(x, X, y)[0]


def test_threads_summing_at_once_with_other_parameters_get_each_their_own_sums() -> None:
    """A worker's task threads compute portions at once (a backup of an earlier evaluation
    beside the next one's): each thread's module holds its own parameters."""
    from concurrent.futures import ThreadPoolExecutor

    model = TorchModel(small_cnn, input_shape=(1, 8, 8))
    X, y = np.random.default_rng(2).uniform(size=(400, 64)), np.arange(400) % 10
    starts = [model.init_params(seed) for seed in range(4)]
    alone = [model.loss_grad_sum(x, X, y)[0] for x in starts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: model.loss_grad_sum(starts[i % 4], X, y)[0], range(40)))
    assert together == [alone[i % 4] for i in range(40)]


@pytest.mark.parametrize("solver, options, accuracy", [
    ("sandblaster", {"maxiter": 40}, 0.95),
    ("downpour", {"epochs": 3, "batch_size": 50, "learning_rate": 0.3}, 0.85),
    ("sync", {"epochs": 3, "batch_size": 50, "learning_rate": 0.3}, 0.85),
    ("easgd", {"epochs": 3, "batch_size": 50, "learning_rate": 0.3}, 0.85),
    ("gossip", {"epochs": 3, "batch_size": 50, "learning_rate": 0.3}, 0.85),
    ("neighbours", {"epochs": 3, "batch_size": 50, "learning_rate": 0.3}, 0.85),
])
def test_every_solver_trains_a_convolutional_net_on_the_digits(client, digits, solver, options, accuracy) -> None:
    model = TorchModel(small_cnn, input_shape=(1, 8, 8), l2=1e-4)
    result = minimize(model, digits["train"], solver=solver, client=client, eval_data=digits["test"], **options)
    assert result.history[-1]["eval_accuracy"] > accuracy, (solver, result.history[-1])
    scores = evaluate(model, result.x, digits["test"], client=client)
    assert scores["accuracy"] == pytest.approx(result.history[-1]["eval_accuracy"])
    predicted = model.to_module(result.x)(torch.as_tensor(digits["test"].load_rows(0, 300)[0], dtype=torch.float32)
                                           .reshape(300, 1, 8, 8)).argmax(dim=1).numpy()
    assert np.mean(predicted == digits["test"].load_rows(0, 300)[1]) == pytest.approx(scores["accuracy"])


def test_a_saved_model_is_its_factorys_import_path_and_sandblaster_resumes_its_checkpoint_bitwise(
        client, digits, tmp_path) -> None:
    model = TorchModel(small_cnn, input_shape=(1, 8, 8), l2=1e-4)
    assert model._config()["module"] == f"{__name__}:small_cnn"
    whole = minimize(model, digits["train"], client=client, maxiter=10)
    minimize(model, digits["train"], client=client, maxiter=5, checkpoint_path=tmp_path / "ckpt")
    resumed = minimize(model, digits["train"], client=client, maxiter=10, checkpoint_path=tmp_path / "ckpt",
                       resume=True)
    np.testing.assert_array_equal(resumed.x, whole.x)
    save_params(tmp_path / "cnn.npz", model, whole.x)
    loaded, params, _ = load_params(tmp_path / "cnn.npz")
    assert isinstance(loaded, TorchModel) and loaded == TorchModel(f"{__name__}:small_cnn", input_shape=(1, 8, 8),
                                                                      l2=1e-4)
    X = digits["test"].load_rows(0, 300)[0]
    np.testing.assert_array_equal(loaded.predict_proba(params, X), model.predict_proba(whole.x, X))


def test_a_module_that_cannot_be_recorded_is_refused_before_anything_is_written(client, digits, tmp_path) -> None:
    model = TorchModel(lambda: small_cnn(), input_shape=(1, 8, 8))
    with pytest.raises(ConfigurationError, match=r"TorchModel\(module=<function .*: its module cannot be written "
                                                 r".* give module='package.module:factory'"):
        save_params(tmp_path / "cnn.npz", model, model.init_params())
    with pytest.raises(ConfigurationError, match=r"TorchModel\(.*: its module cannot be written"):
        minimize(model, digits["train"], client=client, maxiter=3, checkpoint_path=tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


class _Counts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 2)
        self.steps = nn.Parameter(torch.zeros(1, dtype=torch.long), requires_grad=False)

    def forward(self, x):
        return self.linear(x)


def _errors():
    return [
        (lambda: TorchModel(42), ConfigurationError, r"module must be a torch.nn.Module or a factory of one, got 42"),
        (lambda: TorchModel("nowhere.at_all:net"), ConfigurationError,
         r"cannot import the torch module factory 'nowhere.at_all:net': No module named 'nowhere'"),
        (lambda: TorchModel("no_colon"), ConfigurationError, r"'package.module:factory', got 'no_colon'"),
        (lambda: TorchModel(lambda: "a string"), ConfigurationError, r"returned str, not a torch.nn.Module"),
        (lambda: TorchModel(_Counts()), ConfigurationError, r"parameter\(s\) \['steps'\] are not floating point"),
        (lambda: TorchModel(nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))), ConfigurationError,
         r"layer\(s\) \['1'\] normalise by the statistics of a batch \(BatchNorm\).*GroupNorm or LayerNorm"),
        (lambda: TorchModel(small_cnn, input_shape=(64,)), ConfigurationError,
         r"forward pass failed on one row of input shape \(1, 64\): RuntimeError: .*conv2d"),
        (lambda: TorchModel(small_cnn), ConfigurationError, r"give input_shape .* first layer is Conv2d"),
        (lambda: TorchModel(nn.Linear(6, 1)), ConfigurationError, r"'cross_entropy' needs a module with 2 or more"),
        (lambda: TorchModel(nn.Linear(6, 3), loss="mse"), ConfigurationError, r"'mse' needs a module with one output"),
        (lambda: TorchModel(nn.Linear(6, 3), loss="hinge"), ConfigurationError, r"loss must be one of"),
        (lambda: TorchModel(nn.Linear(6, 1), loss=lambda o, y: o), ConfigurationError,
         r"a callable loss needs task="),
        (lambda: TorchModel(nn.Sequential(nn.ReLU())), ConfigurationError, r"the torch module has no parameters"),
        (lambda: TorchModel(nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 2).double())), ConfigurationError,
         r"the module's parameters mix dtypes \['torch.float32', 'torch.float64'\]; give it one"),
        (lambda: TorchModel(nn.Sequential(nn.Embedding(10, 3, sparse=True), nn.Flatten(), nn.Linear(3, 2)),
                            input_shape=(1,)), ConfigurationError, r"nn.Embedding\(sparse=True\) is not taken yet"),
        (lambda: TorchModel(nn.Linear(6, 3), loss="reconstruction_mse"), ConfigurationError,
         r"'reconstruction_mse' needs a module with as many outputs per row as its input has features \(6\), "
         r"this one has 3"),
        (lambda: TorchModel(nn.Linear(6, 1), loss="mse", task="classification"), ConfigurationError,
         r"loss 'mse' is for regression, not task='classification'"),
        (lambda: TorchModel(nn.Sequential(nn.Linear(6, 4), nn.Unflatten(1, (2, 2)))), ConfigurationError,
         r"must return \(rows, outputs\) or \(rows,\); on input \(1, 6\) it returned shape \(1, 2, 2\)"),
    ]


@pytest.mark.parametrize("case", range(len(_errors())))
def test_bad_modules_and_losses_are_refused_with_what_to_do(case) -> None:
    make, error, match = _errors()[case]
    with pytest.raises(error, match=match):
        make()


def test_data_the_module_cannot_take_is_refused_before_training(client, digits, tmp_path) -> None:
    with pytest.raises(ModelDataMismatchError, match=r"input_shape \(1, 6, 6\) takes 36 features per row, but the "
                                                     r"dataset at .* has 64"):
        minimize(TorchModel(lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 10)), input_shape=(1, 6, 6)),
                 digits["train"], client=client, maxiter=2)
    five = TorchModel(lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 5)), input_shape=(64,))
    with pytest.raises(ModelDataMismatchError, match=r"needs integer labels in 0..4, .* the first is y = \d in shard "
                                                     r"\d at row \d+"):
        minimize(five, digits["train"], client=client, maxiter=2)
    with pytest.raises(PartitionError, match=r"TorchModel cannot be partitioned"):
        minimize(TorchModel(small_cnn, input_shape=(1, 8, 8)), digits["train"], client=client, maxiter=2,
                 model_partitions=2)
    with pytest.raises(ModelDataMismatchError, match=r"the loss callable must return one loss per row"):
        TorchModel(nn.Linear(6, 1), loss=lambda out, y: out.sum(), task="regression").loss_grad_sum(
            np.zeros(7), *_rows(4)[:1], np.zeros(4))


def test_without_torch_the_message_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what an environment without torch imports
    with pytest.raises(ConfigurationError, match=r"TorchModel needs PyTorch, which is not installed: pip install "
                                                 r"'dasklbfgs\[torch\]'"):
        TorchModel("tests.models.test_torch_model:small_cnn")


def test_a_worker_that_cannot_import_the_factory_is_named_before_any_work(client, digits, tmp_path,
                                                                          monkeypatch) -> None:
    (tmp_path / "client_only_nets.py").write_text(
        "from torch import nn\n\n\ndef net():\n    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # this process imports it; the workers do not
    model = TorchModel("client_only_nets:net", input_shape=(64,))
    with pytest.raises(ConfigurationError, match=r"worker\(s\) cannot build the factory 'client_only_nets:net': "
                                                 r"tcp://127\.0\.0\.1:\d+: ConfigurationError: cannot import the torch "
                                                 r"module factory 'client_only_nets:net': No module named "
                                                 r"'client_only_nets'; tcp://.*install what defines it on every "
                                                 r"worker"):
        minimize(model, digits["train"], client=client, maxiter=2)
    with pytest.raises(ConfigurationError, match=r"worker\(s\) cannot build the factory 'client_only_nets:net'"):
        evaluate(model, model.init_params(), digits["test"], client=client)
    with pytest.raises(ConfigurationError, match=r"worker\(s\) cannot build the factory 'client_only_nets:net'"):
        predict(model, model.init_params(), digits["test"], output=tmp_path / "predictions.zarr", client=client)
    assert not (tmp_path / "predictions.zarr").exists()


def test_the_command_line_and_a_pipeline_name_a_torch_module_by_its_factory(client, digits, tmp_path) -> None:
    from pathlib import Path

    from dasklbfgs.pipeline import load_config, run_pipeline
    from tests.cli.test_cli import run

    name = f"torch:{__name__}:small_cnn"
    flags = ["train", "--data", digits["train"].url, "--test", digits["test"].url, "--model", name,
             "--input-shape", "1,8,8", "--l2", "1e-4", "--maxiter", "30", "--scheduler", client.scheduler.address,
             "--output", str(tmp_path / "cnn.npz"), "--json"]
    root = str(Path(__file__).resolve().parents[2])  # where the command's Python finds this module, as the workers do
    no_loss = run(*flags, check=False, pythonpath=root)
    assert no_loss.returncode == 2 and "records no task: give the torch model's loss, one of ('cross_entropy'" \
        in no_loss.stderr
    report = json.loads(run(*flags, "--loss", "cross_entropy", check=False, pythonpath=root).stdout)
    assert report["test"]["accuracy"] > 0.9 and report["model"].startswith(f"TorchModel(module='{name[6:]}'")
    loaded, params, _ = load_params(tmp_path / "cnn.npz")
    assert loaded.input_shape == (1, 8, 8) and loaded.loss == "cross_entropy" and params.shape == (loaded.n_params,)
    bad = run("train", "--data", digits["train"].url, "--model", "softmax", "--input-shape", "1,8,8", check=False)
    assert bad.returncode == 2 and "model 'softmax' does not take option(s) ['--input-shape']" in bad.stderr

    config = tmp_path / "digits-cnn.yaml"  # the digits recipe records its task: the loss follows from it
    config.write_text(f"pipeline: {{name: digits-cnn}}\ndata: {{recipe: digits, shard_rows: 500}}\n"
                      f"model: {{name: '{name}', input_shape: [1, 8, 8], l2: 1.0e-4}}\n"
                      "train: {solver: sandblaster, gtol: 3.0e-3}\n")
    metrics = run_pipeline(load_config(config), tmp_path / "reports", client=client)
    assert metrics["success"] and metrics["test"]["accuracy"] > 0.85, metrics["message"]
    assert metrics["model"].startswith(f"TorchModel(module='{name[6:]}', loss='cross_entropy'")


@pytest.mark.filterwarnings("ignore:TorchClassifier did not converge")  # 25 iterations: enough for 0.9
def test_the_estimators_fit_inside_grid_search_and_reach_scikit_learns_least_squares(client, digits) -> None:
    from sklearn.datasets import make_regression
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import GridSearchCV

    from dasklbfgs.estimators import TorchClassifier, TorchRegressor

    X, y = digits["train"].load_rows(0, 1497)
    X_test, y_test = digits["test"].load_rows(0, 300)
    labels = np.array(list("abcdefghij"))  # any labels, seen by the module as 0..9
    search = GridSearchCV(TorchClassifier(small_cnn, input_shape=(1, 8, 8), max_iter=25),  # the active client
                          {"l2": [1e-4, 1e-1]}, cv=2).fit(X, labels[y.astype(int)])
    assert search.best_params_ == {"l2": 1e-4} and search.score(X_test, labels[y_test.astype(int)]) > 0.9
    fitted = search.best_estimator_
    assert isinstance(fitted.module_, nn.Module) and list(fitted.classes_) == list(labels)
    np.testing.assert_allclose(fitted.predict_proba(X_test).sum(axis=1), 1.0)
    # a dataset is scored by the workers (ScoredOnTheCluster before scikit-learn's mixin), as the others are
    on_digits = TorchClassifier(small_cnn, input_shape=(1, 8, 8), max_iter=25).fit(digits["train"])
    assert on_digits.score(digits["test"]) == pytest.approx(np.mean(on_digits.predict(X_test) == y_test))

    X, y = make_regression(n_samples=400, n_features=5, noise=1.0, random_state=0)
    linear = TorchRegressor(lambda: nn.Linear(5, 1).double(), max_iter=200, tol=1e-10, client=client).fit(X, y)
    reference = LinearRegression().fit(X, y)
    np.testing.assert_allclose(linear.module_.weight.detach().numpy()[0], reference.coef_, rtol=1e-7)
    assert linear.score(X, y) == pytest.approx(reference.score(X, y), rel=1e-12)
    with pytest.raises(ConfigurationError, match=r"the module has 10 output\(s\) for 10 classes, but y holds 3"):
        TorchClassifier(small_cnn, input_shape=(1, 8, 8), client=client).fit(X_test, y_test.astype(int) % 3)
    with pytest.raises(ConfigurationError, match=r"TorchRegressor needs module="):
        TorchRegressor(client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match=r"loss 'cross_entropy' is for classification; TorchRegressor fits "
                                                 r"regression"):
        TorchRegressor(small_cnn, loss="cross_entropy", input_shape=(1, 8, 8), client=client).fit(X_test, y_test)


@pytest.mark.parametrize("factory, input_shape, loss, features, labels", [
    ("digits_cnn", (1, 8, 8), "cross_entropy", 64, 10),
    ("digits_resnet", (1, 8, 8), "cross_entropy", 64, 10),
    ("digits_autoencoder", (1, 8, 8), "reconstruction_mse", 64, None),
    ("acoustic_mlp", None, "cross_entropy", 440, 128),
    ("text_lm", (3,), "cross_entropy", 3, 2000),
])
def test_the_shipped_torch_workloads_meet_the_contract(factory, input_shape, loss, features, labels) -> None:
    from dasklbfgs.testing import check_model

    model = TorchModel(f"dasklbfgs.models.torch_nets:{factory}", input_shape=input_shape, loss=loss, l2=1e-3)
    rng = np.random.default_rng(0)
    X = (rng.integers(0, 2000, size=(40, 3)) if factory == "text_lm" else rng.uniform(size=(40, features)))
    y = np.zeros(40) if labels is None else rng.integers(0, labels, 40)
    assert model.n_features == features and model.task == ("reconstruction" if labels is None else "classification")
    assert check_model(model, X.astype(np.float32), y, rng.uniform(0.5, 2.0, 40))[-1] == "refuses"


class _WithRandomBuffer(nn.Module if TORCH_TESTS else object):  # type: ignore[misc]
    """A fixed random projection (a buffer, not a parameter) before a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("projection", torch.randn(6, 6))
        self.linear = nn.Linear(6, 3)
        self.frozen = nn.Parameter(torch.ones(3), requires_grad=False)  # trained all the same
        self.unused = nn.Parameter(torch.zeros(2))  # in no forward pass: its gradient is zero

    def forward(self, x):
        return self.linear(x @ self.projection) * self.frozen


GLOBAL_NET = nn.Linear(6, 3) if TORCH_TESTS else None  # a module object an import path names


def test_buffers_frozen_and_unused_parameters_and_modules_named_by_path() -> None:
    from concurrent.futures import ThreadPoolExecutor

    X, y = np.random.default_rng(3).normal(size=(50, 6)), np.arange(50) % 3
    model = TorchModel(_WithRandomBuffer, input_shape=(6,))
    x = model.init_params(2)
    with ThreadPoolExecutor(2) as pool:  # each thread builds its module: the same random buffer in each
        sums = list(pool.map(lambda _: model.loss_grad_sum(x, X, y), range(4)))
    assert all(s[0] == sums[0][0] and np.array_equal(s[1], sums[0][1]) for s in sums)
    frozen, unused = slice(0, 3), slice(3, 5)  # the module's own parameters come before its layers
    assert np.all(sums[0][1][frozen] != 0) and np.all(sums[0][1][unused] == 0)
    outputs = model.to_module(x)(torch.as_tensor(X, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(outputs, model.decision_function(x, X), rtol=1e-6)
    with pytest.raises(ModelDataMismatchError, match=r"params must have shape \(26,\) for this TorchModel, got "
                                                     r"\(27,\)"):
        model.loss_grad_sum(np.zeros(27), X, y)

    before = [p.detach().clone() for p in GLOBAL_NET.parameters()]
    named = TorchModel(f"{__name__}:GLOBAL_NET")
    named.loss_grad_sum(named.init_params(None) + 1.0, X, y)
    assert all(torch.equal(a, b) for a, b in zip(before, GLOBAL_NET.parameters()))  # never trained in place
