"""Model names used by the command line and pipelines, and building a model for a dataset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models._layers import ACTIVATIONS
from dasklbfgs.models.autoencoder import SparseAutoencoder
from dasklbfgs.models.base import Model
from dasklbfgs.models.embedding import EmbeddingLM
from dasklbfgs.models.glm import GAMMA_LINKS, Gamma, NegativeBinomial, Poisson, Tweedie
from dasklbfgs.models.linear import LeastSquares, Logistic, Softmax
from dasklbfgs.models.local_autoencoder import LocalAutoencoder
from dasklbfgs.models.mlp import MLP
from dasklbfgs.models.robust import Huber
from dasklbfgs.models.torch_model import TORCH_LOSSES, TorchModel
from dasklbfgs.options import Options, option

#: The models the command line and pipelines build by name: each declares its name, its
#: shape options and what it takes (:class:`~dasklbfgs.models.base.Model`), and sizes itself
#: for a dataset (:meth:`~dasklbfgs.models.base.Model.for_dataset`). A new model is its
#: module plus its class here.
CLASSES: dict[str, type[Model]] = {
    cls.name: cls for cls in (LeastSquares, Logistic, Softmax, Poisson, Gamma, Tweedie, NegativeBinomial, Huber, MLP,
                              SparseAutoencoder, LocalAutoencoder, EmbeddingLM)
}
MODELS = tuple(CLASSES)
LINEAR = tuple(name for name, cls in CLASSES.items() if cls.linear)
#: A user's torch module by name: ``torch:package.module:factory`` (a :class:`TorchModel`).
TORCH_PREFIX = "torch:"
#: What a model name may be, in words (messages and help)
MODEL_NAMES_IN_WORDS = f"one of {MODELS!r}, or {TORCH_PREFIX}package.module:factory (a torch module of yours)"


class _ModelNames(tuple[str, ...]):
    """The shipped models' names, listed; ``in`` also takes a ``torch:`` name (the command
    line's ``--model`` choices)."""

    def __contains__(self, name: object) -> bool:
        torch_name = isinstance(name, str) and name.startswith(TORCH_PREFIX) and len(name) > len(TORCH_PREFIX)
        return torch_name or super().__contains__(name)


MODEL_CHOICES = _ModelNames(MODELS)


def model_class(name: str) -> type[Model]:
    """The class model ``name`` builds (a ``torch:`` name: :class:`TorchModel`)."""
    if isinstance(name, str) and name.startswith(TORCH_PREFIX):
        return TorchModel
    if name not in CLASSES:
        raise ConfigurationError(f"model must be {MODEL_NAMES_IN_WORDS}, got {name!r}")
    return CLASSES[name]


def _shape(help: str, kind: str, **spec: Any) -> Any:
    """A neural model's shape option; absent, the model's own default applies."""
    return option(None, help, kind, nullable=True, none_means="the model's", **spec)


@dataclass(frozen=True, kw_only=True)
class ModelOptions(Options):
    """:func:`model_for_dataset`'s options, declared once for the ``dasklbfgs train`` flags
    and the pipelines' ``model:`` keys (the models check the values)."""

    solver: ClassVar[str] = "model"
    l2: float = option(0.0, "l2 penalty strength", "float", minimum=0)
    l1: float = option(0.0, "l1 penalty strength on the coefficients of linear models (never the intercepts); "
                       "Sandblaster then runs OWL-QN, and l1 with l2 is the elastic net", "float", minimum=0)
    fit_intercept: bool = option(True, "fit an intercept (linear models)", "bool", aliases=("intercept",))
    class_weight: str | None = option(None, "logistic and softmax: 'balanced' weighs each class's rows by "
                                      "total weight / (classes x the class's weight), as scikit-learn's",
                                      "choice", choices=("balanced",), nullable=True, none_means="every class 1")
    hidden: tuple[int, ...] | None = _shape("hidden layer widths, e.g. 256,256 (embedding_lm: one width)",
                                            "ints")
    activation: str | None = _shape("mlp hidden activation", "choice", choices=tuple(ACTIVATIONS))
    n_hidden: int | None = _shape("sparse_autoencoder hidden units", "int", minimum=1)
    sparsity: float | None = _shape("sparse_autoencoder target activation", "float", positive=True)
    beta: float | None = _shape("sparse_autoencoder sparsity weight", "float", minimum=0)
    window: int | None = _shape("local_autoencoder window side in pixels", "int", minimum=1)
    stride: int | None = _shape("local_autoencoder pixels between windows", "int", minimum=1)
    maps: int | None = _shape("local_autoencoder hidden units per window location", "int", minimum=1)
    embed_dim: int | None = _shape("embedding_lm embedding width", "int", minimum=1)
    loss: str | None = _shape("torch models: the per-row loss (default: cross_entropy for classes, mse for "
                              "regression, poisson_nll for counts)", "choice", choices=tuple(TORCH_LOSSES))
    input_shape: tuple[int, ...] | None = _shape("torch models: the shape of one row as the module takes it, e.g. "
                                                 "1,8,8", "ints")
    lower_bounds: float | None = option(None, "linear models: the least value of every coefficient (never the "
                                        "intercepts); Sandblaster keeps it by a projected quasi-Newton method",
                                        "float", nullable=True, none_means="no bound")
    upper_bounds: float | None = option(None, "linear models: the greatest value of every coefficient (never the "
                                        "intercepts)", "float", nullable=True, none_means="no bound")
    non_negative: bool = option(False, "linear models: coefficients >= 0 (lower_bounds 0)", "bool")
    power: float | None = _shape("tweedie variance power: 0, or >= 1 (1 Poisson, 2 Gamma; default 1.5)", "float",
                                 minimum=0)
    link: str | None = _shape("gamma link: 'log' (mean exp(z), the default) or 'inverse' (canonical, mean 1/z, "
                              "z > 0)", "choice", choices=GAMMA_LINKS)
    dispersion: float | None = _shape("negative_binomial dispersion a, fixed: variance mu + a mu^2 (statsmodels' "
                                      "alpha; default 1.0)", "float", positive=True)
    epsilon: float | None = _shape("huber threshold in units of the scale, > 1: residuals beyond epsilon x scale "
                                   "count linearly (outliers); the scale is estimated with the coefficients "
                                   "(default 1.35, scikit-learn's)", "float", positive=True)


def model_options(values: dict[str, Any]) -> dict[str, Any]:
    """The :class:`ModelOptions` among ``values`` that were given (not ``None``)."""
    return {k: v for k, v in values.items() if k in ModelOptions.fields() and v is not None}


#: The model a dataset's recorded ``task`` attribute (written by the recipes) implies.
MODEL_FOR_TASK = {"binary": "logistic", "multiclass": "softmax", "regression": "least_squares",
                  "counts": "poisson", "amounts": "gamma", "unsupervised": "sparse_autoencoder"}


def default_model(data: Dataset) -> str:
    """The model ``data``'s recorded task implies: ``binary`` -> logistic, ``multiclass`` ->
    softmax (a dataset with a vocabulary: embedding_lm), ``regression`` -> least_squares,
    ``counts`` -> poisson, ``amounts`` -> gamma, ``unsupervised`` -> sparse_autoencoder;
    ``classification`` by its ``n_classes``."""
    task = data.attrs.get("task")
    if task == "classification" and data.attrs.get("n_classes") is not None:
        task = "binary" if int(data.attrs["n_classes"]) <= 2 else "multiclass"
    if task == "multiclass" and data.attrs.get("vocab_size") is not None:
        return "embedding_lm"
    if task not in MODEL_FOR_TASK:
        recorded = "records no task" if task is None else f"records task {task!r}, which names no model"
        raise ConfigurationError(f"dataset {data.url!r} {recorded}: choose the model, one of {MODELS!r} "
                                 "(--model, or model: name: in a pipeline)")
    return MODEL_FOR_TASK[task]


def model_for_dataset(name: str, data: Dataset, *, l2: float = 0.0, l1: float = 0.0, fit_intercept: bool = True,
                      class_weight: str | None = None, lower_bounds: float | None = None,
                      upper_bounds: float | None = None, non_negative: bool = False, **options: Any) -> Model:
    """Build model ``name`` sized for ``data`` (classes or vocabulary from the dataset).

    ``options`` are the model's shape options (its ``shape_options``); ``fit_intercept``,
    ``l1`` and the bounds (``non_negative`` is ``lower_bounds=0``) apply to the linear models
    only (the neural ones always have biases, and OWL-QN's orthants suit convex objectives),
    ``class_weight`` to the models that take it (logistic and softmax). What the model reads of ``data`` is its own
    (:meth:`~dasklbfgs.models.base.Model.for_dataset`).
    """
    cls = model_class(name)
    allowed = cls.shape_options
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigurationError(
            f"model {name!r} does not take option(s) {unknown}; it takes {list(allowed) or 'none'}",
            parameters=(*unknown, *allowed),
        )
    if cls is TorchModel:
        options["module"] = name[len(TORCH_PREFIX):]
    if class_weight is not None and not cls.takes_class_weight:
        takers = " and ".join(n for n, c in CLASSES.items() if c.takes_class_weight)
        raise ConfigurationError(f"class_weight applies to the classifiers {takers}, not {name!r}")
    if class_weight not in (None, "balanced"):
        raise ConfigurationError(f"class_weight must be 'balanced' or None, got {class_weight!r}")
    if not cls.linear and not fit_intercept:
        raise ConfigurationError(f"fit_intercept=False applies to linear models, not {name!r}")
    if not cls.linear and l1:
        raise ConfigurationError(
            f"l1={l1!r} applies to the linear models {list(LINEAR)}, not {name!r}; use l2 for {name!r}"
        )
    if non_negative:
        if lower_bounds is not None:
            raise ConfigurationError(f"non_negative is lower_bounds=0; give one of them, not both (lower_bounds="
                                     f"{lower_bounds!r})")
        lower_bounds = 0.0
    bounded = lower_bounds is not None or upper_bounds is not None
    if bounded and not cls.linear:
        raise ConfigurationError(f"bounds (lower_bounds, upper_bounds, non_negative) apply to the linear models "
                                 f"{list(LINEAR)}, not {name!r}")
    model = cls.for_dataset(data, l2=l2, l1=l1, fit_intercept=fit_intercept, class_weight=class_weight, **options)
    if not bounded:
        return model
    return type(model)(**{**model._config(), "lower_bounds": lower_bounds, "upper_bounds": upper_bounds})
