"""The paper's and Jin et al.'s workloads as torch modules: zero-argument factories sized for
the dataset recipes' defaults, for :class:`~dasklbfgs.models.TorchModel` and the command
line's and pipelines' ``torch:dasklbfgs.models.torch_nets:<name>``.

- :func:`digits_cnn`, :func:`digits_resnet`: classifiers of scikit-learn's 8x8 digits (the
  ``digits`` recipe; ``input_shape=(1, 8, 8)``), the second a small residual network, Jin
  et al.'s workload for comparing synchronous and asynchronous SGD;
- :func:`digits_autoencoder`: a convolutional autoencoder of the same images
  (``loss="reconstruction_mse"``);
- :func:`acoustic_mlp`: the paper's acoustic model (the ``acoustic`` recipe: 11 frames x 40
  features, 128 classes);
- :func:`text_lm`: the embedding language model (the ``text`` recipe: 3 previous words of a
  2,000-word vocabulary, the next word's class), its embedding dense.
"""

from __future__ import annotations

from typing import Any

__all__ = ["digits_cnn", "digits_resnet", "digits_autoencoder", "acoustic_mlp", "text_lm"]


def digits_cnn() -> Any:
    """Two 3x3 convolutions and a linear layer: 8x8 images into 10 digits."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 6 * 6, 10))


def digits_resnet() -> Any:
    """A small residual CNN: a stem, two residual blocks (GroupNorm: no batch statistics),
    global average pooling and a linear layer, 8x8 images into 10 digits."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.GroupNorm(4, width), nn.ReLU(),
                                      nn.Conv2d(width, width, 3, padding=1), nn.GroupNorm(4, width))

        def forward(self, x: Any) -> Any:
            return nn.functional.relu(x + self.body(x))

    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), Block(16), Block(16),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def digits_autoencoder() -> Any:
    """A convolutional autoencoder of 8x8 images through 4x4x4 codes (flat 64 outputs)."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2, padding=1),
                         nn.Tanh(), nn.ConvTranspose2d(4, 8, 2, stride=2), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1),
                         nn.Flatten())


def acoustic_mlp() -> Any:
    """The paper's acoustic model: 440 inputs (11 frames x 40), a hidden layer of 256 ReLUs,
    128 classes."""
    from torch import nn

    return nn.Sequential(nn.Linear(440, 256), nn.ReLU(), nn.Linear(256, 128))


def text_lm() -> Any:
    """The embedding language model: 3 previous word ids -> 32-wide embeddings -> 128 tanh
    units -> 2,000 next-word classes."""
    from torch import nn

    class EmbeddingLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(2000, 32)
            self.hidden = nn.Linear(3 * 32, 128)
            self.out = nn.Linear(128, 2000)

        def forward(self, ids: Any) -> Any:
            return self.out(nn.functional.tanh(self.hidden(self.embed(ids.long()).flatten(1))))

    return EmbeddingLM()
