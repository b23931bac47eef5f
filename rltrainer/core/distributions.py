"""Action distributions built from a network's outputs.

Thin, fast wrappers: sampling and log-probabilities avoid ``torch.distributions``'
argument validation and object overhead on the inference hot path.
"""

from __future__ import annotations

import math

import torch
from gymnasium import spaces
from torch.nn import functional as F  # noqa: N812


class Categorical:
    """Categorical over ``n`` actions from unnormalized logits ``[B, n]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = torch.log_softmax(logits, dim=-1)

    @staticmethod
    def required_inputs(space: spaces.Discrete) -> int:
        return int(space.n)

    def sample(self) -> torch.Tensor:
        return torch.multinomial(self.logits.exp(), 1).squeeze(-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.argmax(self.logits, dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)


class DiagGaussian:
    """Diagonal Gaussian from ``[B, 2 * d]`` inputs: means, then log standard deviations."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.mean, self.log_std = inputs.chunk(2, dim=-1)
        self.std = self.log_std.exp()

    @staticmethod
    def required_inputs(space: spaces.Box) -> int:
        return 2 * int(math.prod(space.shape))

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        var_ratio = (self.std / other.std).pow(2)
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1)


def dist_class_for(space: spaces.Space) -> type[Categorical] | type[DiagGaussian]:
    """The distribution class for an action space."""
    if isinstance(space, spaces.Discrete):
        return Categorical
    if isinstance(space, spaces.Box):
        return DiagGaussian
    raise ValueError(f"unsupported action space {space}: use Discrete or Box")
