"""``TorchModel``: a user's ``torch.nn.Module`` trained by every dasklbfgs solver.

The parameters are one float64 vector in the order of
``torch.nn.utils.parameters_to_vector(module.parameters())``, so
``vector_to_parameters`` puts them back (:meth:`TorchModel.to_module`). The objective is

    f(theta) = (1 / sum_i w_i) sum_i w_i loss(module(x_i), y_i) + (l2 / 2) sum ||W||^2

over the weight tensors (two or more dimensions; biases and norms' scales are not
penalised), a weighted mean over rows, so sums from any split of the rows add up: the
contract every solver relies on (:mod:`dasklbfgs.models.base`).

How the sums are made:

- The module is built once per thread of a worker process (a factory is called, a module
  object copied) and cached under the model's token, not once per task; each call loads the
  parameters into it. One per thread: a worker's task threads compute sums at once, and
  none may load parameters into a module another is running.
- The rows are taken in blocks of ``block_rows``, so a portion's activations stay bounded;
  each block's loss and gradient are computed in the module's dtype and added in float64.
- The module runs in eval mode (dropout off). Layers that normalise by the statistics of
  a batch (BatchNorm) are refused: their sums over rows do not add up, and their running
  statistics are buffers, not parameters. GroupNorm and LayerNorm work.
- torch computes each block on ``threads`` intra-op threads (default 1, one per Dask
  thread): with a fixed thread count, a portion's sums are the same bits whichever worker
  computes them, so Sandblaster's runs are bitwise reproducible across worker counts and
  kills, as with the numpy models.
"""

from __future__ import annotations

import copy
import importlib
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models.base import Model, check_l2

__all__ = ["TorchModel", "TORCH_LOSSES", "import_torch"]

#: The named losses: what each is for (the model's ``task``). A callable
#: ``(outputs, y) -> per-row losses`` is taken too, with the ``task`` given.
TORCH_LOSSES = {"cross_entropy": "classification", "bce_with_logits": "classification", "mse": "regression",
                "poisson_nll": "regression", "reconstruction_mse": "reconstruction"}
TASKS = ("classification", "regression", "reconstruction")
#: The named loss a dataset's recorded task implies (the command line's and pipelines' default).
LOSS_FOR_TASK = {"binary": "cross_entropy", "multiclass": "cross_entropy", "classification": "cross_entropy",
                 "regression": "mse", "amounts": "mse", "counts": "poisson_nll", "unsupervised": "reconstruction_mse"}
INSTALL_HINT = ("pip install 'dasklbfgs[torch]' (the CPU build: pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu)")

#: (token, thread) -> (module, its parameters): one module per model and thread of a process, so
#: that threads computing sums at once (a worker's task threads) never load parameters into a
#: module another is running
_BUILT: dict[tuple[str, int], Any] = {}
_BUILT_LOCK = threading.Lock()
_BUILT_KEPT = 16  # modules a process keeps (the oldest go first)


def import_torch() -> Any:
    """``torch``, or a :class:`ConfigurationError` that names the extra to install."""
    try:
        import torch
    except ImportError:
        raise ConfigurationError(f"TorchModel needs PyTorch, which is not installed: {INSTALL_HINT}") from None
    return torch


class _Weightless:
    """A module object as it travels to the workers: its structure and buffers, with every
    parameter emptied (a worker loads the parameters with every call anyway), so that the
    model sent with each evaluation is as small as a factory."""

    def __init__(self, module: Any) -> None:
        import torch

        self.shapes = [tuple(p.shape) for p in module.parameters()]
        self.skeleton = copy.deepcopy(module)
        for parameter in self.skeleton.parameters():
            parameter.data = torch.empty(0, dtype=parameter.dtype)

    def module(self) -> Any:
        """A module of the original's structure and buffers; its parameters' values undefined."""
        import torch

        module = copy.deepcopy(self.skeleton)
        for parameter, shape in zip(module.parameters(), self.shapes):
            parameter.data = torch.empty(shape, dtype=parameter.dtype)
        return module

    def __repr__(self) -> str:
        return f"<{type(self.skeleton).__name__} without its weights>"


def _resolve(module: Any) -> Any:
    """The module object or factory ``module`` names (``"package.module:factory"``)."""
    if isinstance(module, _Weightless):
        return module.module()
    if not isinstance(module, str):
        return module
    path, _, attribute = module.partition(":")
    if not path or not attribute:
        raise ConfigurationError(f"a torch module named by a string is 'package.module:factory', got {module!r}")
    try:
        found: Any = importlib.import_module(path)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot import the torch module factory {module!r}: {exc}") from None
    return found


def _import_path(factory: Any) -> str | None:
    """``"package.module:name"`` for a factory importable by name (what a saved model records)."""
    name, where = getattr(factory, "__qualname__", None), getattr(factory, "__module__", None)
    if not name or not where or "<" in name or where == "__main__":
        return None
    try:
        return f"{where}:{name}" if _resolve(f"{where}:{name}") is factory else None
    except ConfigurationError:
        return None


def _build(spec: Any, torch: Any, seed: int = 0) -> Any:
    """A new ``nn.Module`` from ``spec``: a copy of a module object (one the user holds, or one
    an import path names: never trained in place), or what calling a factory returns, made under
    ``torch.manual_seed(seed)``, so that random buffers (not parameters: those are loaded) are
    the same in every thread and process."""
    found = _resolve(spec)
    if isinstance(found, torch.nn.Module):
        return copy.deepcopy(found)
    if not callable(found):
        raise ConfigurationError(f"module must be a torch.nn.Module or a factory of one, got {found!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = found()
    if not isinstance(built, torch.nn.Module):
        raise ConfigurationError(f"the module factory {spec!r} returned {type(built).__name__}, not a "
                                 "torch.nn.Module")
    return built


def _check_layers(module: Any, torch: Any) -> None:
    batch_norms = [name for name, layer in module.named_modules()
                   if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm)]
    if batch_norms:
        raise ConfigurationError(
            f"layer(s) {batch_norms} normalise by the statistics of a batch (BatchNorm): their sums over rows do "
            "not add up and their running statistics are not parameters; use GroupNorm or LayerNorm")
    params = list(module.parameters())
    if not params:
        raise ConfigurationError("the torch module has no parameters to train")
    integral = [name for name, p in module.named_parameters() if not p.dtype.is_floating_point]
    if integral:
        raise ConfigurationError(f"parameter(s) {integral} are not floating point; every parameter is trained")
    if len({p.dtype for p in params}) > 1:
        raise ConfigurationError(f"the module's parameters mix dtypes {sorted({str(p.dtype) for p in params})}; "
                                 "give it one (module.float() or module.double())")
    if any(layer.sparse for layer in module.modules() if isinstance(layer, torch.nn.Embedding)):
        raise ConfigurationError("nn.Embedding(sparse=True) is not taken yet: build the embedding with "
                                 "sparse=False (its gradient is then dense)")


def _prepared(module: Any, torch: Any) -> Any:
    """``module`` checked, in eval mode, every parameter trainable (a frozen one too: the
    parameter vector holds them all)."""
    _check_layers(module, torch)
    for parameter in module.parameters():
        parameter.requires_grad_(True)
    return module.eval()


class TorchModel(Model):
    """A ``torch.nn.Module`` as a model every solver trains.

    Parameters
    ----------
    module
        An ``nn.Module``, a zero-argument factory of one, or the import path of a factory,
        ``"package.module:factory"`` (what a saved model records; a module-level function
        is recorded by its path).
    loss
        ``"cross_entropy"`` (labels 0..K-1, K the module's outputs), ``"bce_with_logits"``
        (labels 0/1, one output), ``"mse"`` (squared error), ``"poisson_nll"`` (counts; the
        output is the log of the mean), ``"reconstruction_mse"`` (an autoencoder: the squared
        error of the outputs against the row's own features, summed over them; y is
        ignored), or a callable ``(outputs, y) -> per-row losses``.
    input_shape
        The shape of one row as the module takes it: the stored rows ``(n, prod(shape))``
        are reshaped to ``(n, *input_shape)``. Default: flat rows, as many features as the
        module's first layer takes when that is an ``nn.Linear``.
    l2
        Weight decay on the weight tensors (two or more dimensions).
    task
        ``"classification"``, ``"regression"`` or ``"reconstruction"``; for a callable loss
        only (a named loss implies its task).
    block_rows
        Rows per forward and backward pass: a portion's memory stays bounded.
    threads
        torch's intra-op threads for a block. Fixed, so that sums are reproducible bits.

    Examples
    --------
    >>> from torch import nn
    >>> net = lambda: nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    >>> model = TorchModel(net, loss="cross_entropy", input_shape=(1, 8, 8), l2=1e-4)
    >>> model.n_features, model.n_classes
    (64, 10)
    """

    name = "torch"
    accepts_weights = True
    shape_options = ("loss", "input_shape")
    n_features: int
    n_params: int

    def __init__(self, module: Any, *, loss: str | Callable[..., Any] = "cross_entropy",
                 input_shape: Sequence[int] | None = None, l2: float = 0.0, task: str | None = None,
                 block_rows: int = 1024, threads: int = 1) -> None:
        torch = import_torch()
        self.module = module
        self.loss: Any = loss  # a name of TORCH_LOSSES, or the user's callable
        if isinstance(loss, str):
            if loss not in TORCH_LOSSES:
                raise ConfigurationError(f"loss must be one of {tuple(TORCH_LOSSES)} or a callable (outputs, y) -> "
                                         f"per-row losses, got {loss!r}")
            if task is not None and task != TORCH_LOSSES[loss]:
                raise ConfigurationError(f"loss {loss!r} is for {TORCH_LOSSES[loss]}, not task={task!r}")
            task = TORCH_LOSSES[loss]
        elif not callable(loss):
            raise ConfigurationError(f"loss must be a name or a callable (outputs, y) -> per-row losses, got {loss!r}")
        if task not in TASKS:
            raise ConfigurationError(f"a callable loss needs task= one of {TASKS}, got {task!r}")
        self.task = task  # type: ignore[misc]
        self.l2 = check_l2(l2)
        self.block_rows = check_int(block_rows, "block_rows")
        self.threads = check_int(threads, "threads")
        self.token = uuid.uuid4().hex
        built = _prepared(_build(module, torch), torch)  # looked at here, not cached: the workers build theirs
        self._weightless = _Weightless(built) if isinstance(_resolve(module), torch.nn.Module) else None
        params = list(built.parameters())
        self.dtype = params[0].dtype
        self.input_shape = self._input_shape(built, input_shape, torch)
        self.n_features = math.prod(self.input_shape)
        self.n_params = sum(p.numel() for p in params)
        #: per tensor, its size and whether the weight decay takes it (two or more dimensions)
        self.tensors = [(p.numel(), p.dim() >= 2) for p in params]
        self.n_outputs = self._probe(built, torch)
        if self.loss == "cross_entropy" and self.n_outputs < 2:
            raise ConfigurationError(f"loss 'cross_entropy' needs a module with 2 or more outputs (one per class), "
                                     f"this one has {self.n_outputs}; for two classes with one output use "
                                     "'bce_with_logits'")
        if self.loss == "reconstruction_mse" and self.n_outputs != self.n_features:
            raise ConfigurationError(f"loss 'reconstruction_mse' needs a module with as many outputs per row as its "
                                     f"input has features ({self.n_features}), this one has {self.n_outputs}")
        if self.loss in ("bce_with_logits", "mse", "poisson_nll") and self.n_outputs != 1:
            raise ConfigurationError(f"loss {self.loss!r} needs a module with one output per row, this one has "
                                     f"{self.n_outputs}")

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    module: Any = None, loss: str | None = None, input_shape: Sequence[int] | None = None,
                    **shape: Any) -> TorchModel:
        """The module ``module`` (an import path, from the command line's
        ``--model torch:package.module:factory``) with the loss ``data``'s recorded task implies
        unless ``loss`` is given."""
        if loss is None:
            task = data.attrs.get("task")
            if task not in LOSS_FOR_TASK:
                recorded = "records no task" if task is None else f"records task {task!r}"
                raise ConfigurationError(f"dataset {data.url!r} {recorded}: give the torch model's loss, one of "
                                         f"{tuple(TORCH_LOSSES)} (--loss, or loss: under a pipeline's model:)")
            loss = LOSS_FOR_TASK[task]
        return cls(module, loss=loss, input_shape=input_shape, l2=l2)

    # -- the module, once per process ------------------------------------------------------

    def _built(self, torch: Any | None = None) -> tuple[Any, list[Any]]:
        """This model's module in this process and its parameter tensors (built on first use)."""
        key = (self.token, threading.get_ident())
        found = _BUILT.get(key)
        if found is not None:
            return found
        torch = torch or import_torch()
        with _BUILT_LOCK:
            if key not in _BUILT:
                module = _prepared(_build(self.module, torch), torch)
                while len(_BUILT) >= _BUILT_KEPT:
                    _BUILT.pop(next(iter(_BUILT)))
                _BUILT[key] = (module, list(module.parameters()))
            return _BUILT[key]

    def check_workers(self, client: Any) -> None:
        """Build the module on every worker of ``client`` (cached there for the run), or raise
        :class:`ConfigurationError` naming the workers that cannot and why (a factory's import
        path that their Python does not have)."""
        failed = {worker: why for worker, why in client.run(_build_here, self).items() if why is not None}
        if failed:
            named = f"the factory {self.module!r}" if isinstance(self.module, str) else "the module"
            raise ConfigurationError(
                f"worker(s) cannot build {named}: " + "; ".join(f"{w}: {why}" for w, why in sorted(failed.items()))
                + "; install what defines it on every worker (the same environment as this process)")

    def __getstate__(self) -> dict[str, Any]:
        # the module is built in each process, under the same token; the penalty's mask is
        # made where the penalty is (the coordinator), a module object travels without its
        # weights: neither is sent with every call to a worker
        state = {k: v for k, v in self.__dict__.items() if k not in ("_penalised", "_weightless")}
        if self._weightless is not None:
            state["module"] = self._weightless
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._weightless = None  # already what it is: a module that arrived without its weights

    @property
    def penalised(self) -> np.ndarray:
        """Per parameter, whether the weight decay takes it (tensors of two or more dimensions)."""
        if "_penalised" not in self.__dict__:
            self._penalised = np.concatenate([np.full(n, weight) for n, weight in self.tensors])
        return self._penalised

    def _input_shape(self, module: Any, input_shape: Sequence[int] | None, torch: Any) -> tuple[int, ...]:
        if input_shape is not None:
            if isinstance(input_shape, (int, np.integer)):
                input_shape = (int(input_shape),)
            return tuple(check_int(n, f"input_shape[{i}]") for i, n in enumerate(input_shape))
        first = next(layer for layer in module.modules() if any(True for _ in layer.parameters(recurse=False)))
        if not isinstance(first, torch.nn.Linear):
            raise ConfigurationError(f"give input_shape (the shape of one row as the module takes it): the module's "
                                     f"first layer is {type(first).__name__}, not an nn.Linear whose in_features "
                                     "would say it")
        return (int(first.in_features),)

    def _probe(self, module: Any, torch: Any) -> int:
        """The module's outputs per row, from a forward pass on one zero row."""
        try:
            with torch.no_grad():
                out = module(torch.zeros((1, *self.input_shape), dtype=self.dtype))
        except Exception as exc:  # the user's forward pass: any error is theirs to read
            raise ConfigurationError(f"the torch module's forward pass failed on one row of input shape "
                                     f"{(1, *self.input_shape)}: {type(exc).__name__}: {exc}") from None
        if out.dim() not in (1, 2) or out.shape[0] != 1:
            raise ConfigurationError(f"the torch module must return (rows, outputs) or (rows,); on input "
                                     f"{(1, *self.input_shape)} it returned shape {tuple(out.shape)}")
        return 1 if out.dim() == 1 else int(out.shape[1])

    @property
    def n_classes(self) -> int:
        if self.task != "classification":
            raise AttributeError(f"a {self.task} TorchModel has no classes")
        return 2 if self.n_outputs == 1 else self.n_outputs

    # -- what every solver calls -------------------------------------------------------------

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """The module's initial parameters: a factory's called under ``torch.manual_seed(seed)``
        (``None`` means 0); a module object's own, re-initialised under the seed when one is given."""
        torch = import_torch()
        spec = _resolve(self.module)
        module = _build(spec, torch, 0 if seed is None else seed)
        if isinstance(spec, torch.nn.Module) and seed is not None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                for layer in module.modules():
                    if hasattr(layer, "reset_parameters"):
                        layer.reset_parameters()
        vector = torch.nn.utils.parameters_to_vector(module.parameters())
        return vector.detach().to(torch.float64).numpy().copy()

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """The per-row losses summed over the rows of ``X`` (weighted by ``w``) and their
        gradient, block by block, added in float64."""
        torch = import_torch()
        module, tensors = self._built(torch)
        loss, grad = 0.0, np.zeros(self.n_params)
        with _threads(torch, self.threads):
            self._load(torch, tensors, params)
            for start in range(0, X.shape[0], self.block_rows):
                block = slice(start, start + self.block_rows)
                rows = self._row_losses(torch, module, X[block], y[block])
                if w is not None:
                    rows = rows * torch.as_tensor(w[block], dtype=rows.dtype)
                total = rows.sum()
                parts = torch.autograd.grad(total, tensors, allow_unused=True, materialize_grads=True)
                grad += torch.cat([p.reshape(-1) for p in parts]).to(torch.float64).numpy()
                loss += float(rows.detach().to(torch.float64).sum())
        return loss, grad

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        weights = np.where(self.penalised, params, 0.0)
        return 0.5 * self.l2 * float(weights @ weights), self.l2 * weights

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Classes (classification) or the predicted values: the outputs for ``mse``, their
        exponential for ``poisson_nll``."""
        if self.task == "classification":
            return np.argmax(self.predict_proba(params, X), axis=1)
        out = self.decision_function(params, X)
        return np.exp(out) if self.loss == "poisson_nll" else out

    def predict_proba(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class probabilities (n, K): the softmax of the outputs (one output: its sigmoid)."""
        if self.task != "classification":
            raise AttributeError(f"a {self.task} TorchModel has no predict_proba")
        z = self.decision_function(params, X)
        if z.ndim == 1:
            p = 1.0 / (1.0 + np.exp(-z))
            return np.column_stack([1.0 - p, p])
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def decision_function(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The module's outputs for the rows of ``X``, in float64: (n, K), or (n,) for one."""
        torch = import_torch()
        module, tensors = self._built(torch)
        blocks = []
        with _threads(torch, self.threads), torch.no_grad():
            self._load(torch, tensors, params)
            for start in range(0, X.shape[0], self.block_rows):
                blocks.append(self._forward(torch, module, X[start : start + self.block_rows]).to(torch.float64))
        out = torch.cat(blocks).numpy() if blocks else np.zeros((0, self.n_outputs))
        return out.reshape(-1) if self.n_outputs == 1 else out

    def to_module(self, params: np.ndarray) -> Any:
        """A new ``nn.Module`` with the parameters ``params`` (``result.x``)."""
        torch = import_torch()
        module = _prepared(_build(self.module, torch), torch)  # the buffers the workers' modules have
        params = self.check_params(params, "params")
        with torch.no_grad():
            # a copy: vector_to_parameters makes the parameters views of the vector it is given
            torch.nn.utils.vector_to_parameters(torch.tensor(params, dtype=self.dtype), module.parameters())
        return module.eval()

    # -- one block ---------------------------------------------------------------------------

    def _load(self, torch: Any, tensors: list[Any], params: np.ndarray) -> None:
        if np.shape(params) != (self.n_params,):
            raise ModelDataMismatchError(f"params must have shape ({self.n_params},) for this TorchModel, got "
                                         f"{np.shape(params)}")
        with torch.no_grad():
            flat = torch.tensor(np.asarray(params, dtype=np.float64), dtype=self.dtype)  # never the caller's memory
            torch.nn.utils.vector_to_parameters(flat, tensors)

    def _rows(self, torch: Any, X: Any) -> Any:
        return torch.as_tensor(np.asarray(X)).to(self.dtype).reshape((X.shape[0], *self.input_shape))

    def _forward(self, torch: Any, module: Any, X: Any) -> Any:
        return module(self._rows(torch, X))

    def _row_losses(self, torch: Any, module: Any, X: Any, y: np.ndarray) -> Any:
        rows = self._rows(torch, X)
        out = module(rows)
        target = torch.as_tensor(np.asarray(y))
        if isinstance(self.loss, str):
            return _named_row_losses(torch, self.loss, out, rows, target)
        losses = self.loss(out, target)
        if losses.shape != (X.shape[0],):
            raise ModelDataMismatchError(f"the loss callable must return one loss per row, shape ({X.shape[0]},); "
                                         f"it returned {tuple(losses.shape)}")
        return losses

    # -- data checks -------------------------------------------------------------------------

    def check_features(self, data: Dataset) -> None:
        if data.n_features != self.n_features and not getattr(data, "is_sparse", False):
            raise ModelDataMismatchError(
                f"input_shape {self.input_shape} takes {self.n_features} features per row, but the dataset at "
                f"{data.url!r} has {data.n_features}")
        super().check_features(data)

    def _check_labels(self, data: Dataset) -> None:
        if self.task == "classification":
            self._check_class_labels(data, self.n_classes)
        elif self.loss == "poisson_nll" and data.label_range[0] < 0:
            raise ModelDataMismatchError(f"loss 'poisson_nll' needs counts >= 0, but y at {data.url!r} goes down to "
                                         f"{data.label_range[0]:g}")

    def _config(self) -> dict[str, Any]:
        path = self.module if isinstance(self.module, str) else _import_path(self.module)
        return {"module": path or self.module, "loss": self.loss, "input_shape": list(self.input_shape),
                "l2": self.l2, "task": None if isinstance(self.loss, str) else self.task,
                "block_rows": self.block_rows, "threads": self.threads}


def _named_row_losses(torch: Any, loss: str, out: Any, rows: Any, target: Any) -> Any:
    """The per-row losses of the named ``loss`` (one of :data:`TORCH_LOSSES`) of the module's
    outputs ``out`` for the input ``rows`` and the labels ``target``."""
    functional = torch.nn.functional
    n = rows.shape[0]
    if loss == "reconstruction_mse":  # the input's own features are the target
        return ((out.reshape(n, -1) - rows.reshape(n, -1)) ** 2).sum(dim=1)
    if loss == "cross_entropy":
        return functional.cross_entropy(out, target.long(), reduction="none")
    flat = out.reshape(-1) if out.dim() == 2 and out.shape[1] == 1 else out
    target = target.to(flat.dtype)
    if loss == "bce_with_logits":
        return functional.binary_cross_entropy_with_logits(flat, target, reduction="none")
    if loss == "mse":
        return (flat - target) ** 2
    assert loss == "poisson_nll", loss  # TORCH_LOSSES, checked at construction
    return functional.poisson_nll_loss(flat, target, log_input=True, full=False, reduction="none")


def _build_here(model: TorchModel) -> str | None:
    """On a worker: build ``model``'s module there (cached), or say why it cannot."""
    try:
        model._built()
    except Exception as exc:  # the user's factory: any error is theirs, reported with the worker's name
        return f"{type(exc).__name__}: {exc}"
    return None


class _threads:
    """torch's intra-op threads set to ``n`` for a block of work, and set back after."""

    def __init__(self, torch: Any, n: int) -> None:
        self.torch, self.n = torch, n

    def __enter__(self) -> None:
        self.before = self.torch.get_num_threads()
        if self.before != self.n:
            self.torch.set_num_threads(self.n)

    def __exit__(self, *exc: Any) -> None:
        if self.torch.get_num_threads() != self.before:
            self.torch.set_num_threads(self.before)
