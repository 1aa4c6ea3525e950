"""Objectives: loss and gradient sums over blocks of rows, prediction, initialisation; the model contract."""

from dasklbfgs.models.autoencoder import SparseAutoencoder
from dasklbfgs.models.base import Model
from dasklbfgs.models.contract import ModelContract
from dasklbfgs.models.embedding import EmbeddingLM
from dasklbfgs.models.glm import Gamma, NegativeBinomial, Poisson, Tweedie
from dasklbfgs.models.linear import LeastSquares, LinearModel, Logistic, Softmax
from dasklbfgs.models.local_autoencoder import LocalAutoencoder
from dasklbfgs.models.mlp import MLP
from dasklbfgs.models.registry import MODELS, model_for_dataset
from dasklbfgs.models.robust import Huber
from dasklbfgs.models.torch_model import TorchModel

__all__ = ["Model", "ModelContract", "LinearModel", "LeastSquares", "Logistic", "Softmax", "Poisson", "Gamma",
           "Tweedie", "NegativeBinomial", "Huber", "MLP", "SparseAutoencoder", "LocalAutoencoder", "EmbeddingLM",
           "TorchModel", "MODELS", "model_for_dataset"]
