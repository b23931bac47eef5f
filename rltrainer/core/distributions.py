"""Action distributions built from a network's outputs.

Thin, fast wrappers: sampling and log-probabilities avoid ``torch.distributions``'
argument validation and object overhead on the inference hot path.

The torch classes answer to RLlib's names too: ``dist_class(inputs, model)`` (the model is
accepted and unused), ``sample()``, ``deterministic_sample()``, ``logp(actions)`` (=
``log_prob``), ``sampled_action_logp()``, ``entropy()`` and ``kl(other)``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core import compiled

if TYPE_CHECKING:
    from rltrainer.core.models import NumpyMLP

_NO_UNIFORMS = np.zeros(0, dtype=np.float32)  # greedy sampling draws none


class Categorical:
    """Categorical over ``n`` actions from unnormalized logits ``[B, n]``."""

    def __init__(self, logits: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        self.logits = torch.log_softmax(logits, dim=-1)
        self.last_sample: torch.Tensor | None = None

    @staticmethod
    def required_inputs(space: spaces.Discrete) -> int:
        return int(space.n)

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.multinomial(self.logits.exp(), 1).squeeze(-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return torch.argmax(self.logits, dim=-1)

    @staticmethod
    def sample_numpy(
        inputs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, logp)`` from numpy logits (the env runners' inference path)."""
        kernels = compiled.for_batch(len(inputs))
        if kernels is not None and inputs.dtype == np.float32 and inputs.flags.c_contiguous:
            uniforms = rng.random(len(inputs), dtype=np.float32) if explore else _NO_UNIFORMS
            actions, logp = np.empty(len(inputs), dtype=np.int64), np.empty(len(inputs), dtype=np.float32)
            kernels.categorical_sample(inputs, uniforms, explore, actions, logp)
            return actions, logp
        shifted = inputs - inputs.max(axis=-1, keepdims=True)
        cdf = np.exp(shifted).cumsum(axis=-1)  # unnormalized; the last column is the partition sum
        total = cdf[:, -1]
        if explore:  # inverse-CDF sampling; u < total <= cdf[-1] keeps actions in range
            actions = (cdf < (rng.random(len(inputs), dtype=np.float32) * total)[:, None]).sum(axis=-1)
        else:
            actions = shifted.argmax(axis=-1)
        return actions, shifted[_rows(len(inputs)), actions] - np.log(total)

    @staticmethod
    def sample_mlp(
        mlp: NumpyMLP, obs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(actions, logp, logits)`` with ``mlp`` giving the logits: one kernel call when compiled."""
        kernels = mlp.kernels_for(obs)
        if kernels is None:
            logits = mlp(obs)
            return (*Categorical.sample_numpy(logits, explore, rng), logits)
        rows = len(obs)
        uniforms = rng.random(rows, dtype=np.float32) if explore else _NO_UNIFORMS
        logits = np.empty((rows, mlp.out_size), dtype=np.float32)
        actions, logp = np.empty(rows, dtype=np.int64), np.empty(rows, dtype=np.float32)
        kernels.mlp_categorical_sample(obs, *mlp.compiled_args, uniforms, explore, logits, actions, logp)
        return actions, logp, logits

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)

    logp = log_prob  # RLlib's name

    def sampled_action_logp(self) -> torch.Tensor:
        """``logp`` of the last ``sample()`` (RLlib's)."""
        return _logp_of_last(self)


class DiagGaussian:
    """Diagonal Gaussian from ``[B, 2 * d]`` inputs: means, then log standard deviations."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        self.mean, self.log_std = inputs.chunk(2, dim=-1)
        self.std = self.log_std.exp()
        self.last_sample: torch.Tensor | None = None

    @staticmethod
    def required_inputs(space: spaces.Box) -> int:
        return 2 * int(math.prod(space.shape))

    def sample(self) -> torch.Tensor:
        self.last_sample = self.mean + self.std * torch.randn_like(self.mean)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    @staticmethod
    def sample_numpy(
        inputs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, logp)`` from numpy means and log stds (the env runners' inference path)."""
        mean, log_std = np.split(inputs, 2, axis=-1)
        if not explore:
            actions = mean.copy()
        else:
            actions = mean + np.exp(log_std) * rng.standard_normal(mean.shape, dtype=np.float32)
        z = (actions - mean) * np.exp(-log_std)
        logp = (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(axis=-1)
        return actions.astype(np.float32), logp.astype(np.float32)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        var_ratio = (self.std / other.std).pow(2)
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1)

    logp = log_prob  # RLlib's name

    def sampled_action_logp(self) -> torch.Tensor:
        """``logp`` of the last ``sample()`` (RLlib's)."""
        return _logp_of_last(self)


class SquashedGaussian:
    """tanh of a diagonal Gaussian (SAC, Haarnoja et al. 2018): actions in (-1, 1).

    Inputs ``[B, 2 * d]``: means, then log standard deviations (clamped to SAC's usual
    [-20, 2]). ``logp`` includes the tanh change of variables, in the numerically stable
    form ``2 * (log 2 - u - softplus(-2u))`` (as in SB3 and CleanRL).
    """

    LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        mean, log_std = inputs.chunk(2, dim=-1)
        self.mean = mean
        self.log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        self.std = self.log_std.exp()

    @staticmethod
    def required_inputs(space: spaces.Box) -> int:
        return 2 * int(math.prod(space.shape))

    def rsample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized ``(actions, logp)``: gradients flow through both."""
        u = self.mean + self.std * torch.randn_like(self.mean)
        z = (u - self.mean) / self.std
        gaussian_logp = (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        correction = (2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), gaussian_logp - correction

    def deterministic_sample(self) -> torch.Tensor:
        return torch.tanh(self.mean)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample_with_logp()[0]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of actions in (-1, 1) (clamped just inside, as RLlib does, for +-1)."""
        eps = torch.finfo(actions.dtype).eps
        u = torch.atanh(actions.clamp(-1.0 + eps, 1.0 - eps))
        z = (u - self.mean) / self.std
        gaussian_logp = (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return gaussian_logp - (2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))).sum(-1)

    logp = log_prob  # RLlib's name (no entropy() or kl(): no closed form, as in RLlib)

    @classmethod
    def sample_numpy(
        cls, inputs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, logp)`` from numpy means and log stds (the env runners' inference path)."""
        mean, log_std = np.split(inputs, 2, axis=-1)
        log_std = np.clip(log_std, cls.LOG_STD_MIN, cls.LOG_STD_MAX)
        noise = rng.standard_normal(mean.shape, dtype=np.float32) if explore else np.zeros_like(mean)
        u = mean + np.exp(log_std) * noise
        gaussian_logp = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(axis=-1)
        correction = (2 * (math.log(2) - u - np.logaddexp(0.0, -2 * u))).sum(axis=-1)
        return np.tanh(u).astype(np.float32), (gaussian_logp - correction).astype(np.float32)


class SquashedDeterministic:
    """A deterministic action in (-1, 1): ``tanh`` of the inputs ``[B, d]`` (DDPG's and TD3's
    actor; RLlib's ``TorchDeterministic`` over a squashed output). Exploration adds the noise;
    ``logp`` is 0 and there is no entropy, as in RLlib."""

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        self.inputs = inputs

    @staticmethod
    def required_inputs(space: spaces.Box) -> int:
        return int(math.prod(space.shape))

    def deterministic_sample(self) -> torch.Tensor:
        return torch.tanh(self.inputs)

    sample = deterministic_sample

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.zeros(actions.shape[0], dtype=actions.dtype, device=actions.device)

    logp = log_prob  # RLlib's name

    @staticmethod
    def sample_numpy(
        inputs: np.ndarray,
        explore: bool,  # noqa: ARG004 - exploration adds the noise
        rng: np.random.Generator,  # noqa: ARG004
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(tanh(inputs), 0)``: the env runners' inference path."""
        return np.tanh(inputs).astype(np.float32), np.zeros(len(inputs), dtype=np.float32)


class MultiCategorical:
    """Independent categoricals over the columns of a MultiDiscrete (or MultiBinary) action:
    inputs ``[B, sum(nvec)]``, the logits of each dimension side by side; actions ``[B, d]``.
    ``multi_categorical(nvec)`` makes the class for one ``nvec``."""

    NVEC: tuple[int, ...] = ()

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        self.parts = [Categorical(x) for x in torch.split(inputs, list(self.NVEC), dim=-1)]
        self.last_sample: torch.Tensor | None = None

    @staticmethod
    def required_inputs(space: spaces.MultiDiscrete | spaces.MultiBinary) -> int:
        return int(np.sum(nvec_of(space)))

    def sample(self) -> torch.Tensor:
        self.last_sample = torch.stack([part.sample() for part in self.parts], dim=-1)
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([part.deterministic_sample() for part in self.parts], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(part.log_prob(actions[..., i]) for i, part in enumerate(self.parts))

    logp = log_prob  # RLlib's name

    def entropy(self) -> torch.Tensor:
        return sum(part.entropy() for part in self.parts)

    def kl(self, other: MultiCategorical) -> torch.Tensor:
        return sum(part.kl(theirs) for part, theirs in zip(self.parts, other.parts, strict=True))

    def sampled_action_logp(self) -> torch.Tensor:
        return _logp_of_last(self)

    @classmethod
    def sample_numpy(
        cls, inputs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions [B, d], logp [B])`` from numpy logits, one categorical per column."""
        actions, logp = np.empty((len(inputs), len(cls.NVEC)), dtype=np.int64), 0.0
        start = 0
        for i, n in enumerate(cls.NVEC):
            part = np.ascontiguousarray(inputs[:, start : start + n])
            actions[:, i], part_logp = Categorical.sample_numpy(part, explore, rng)
            logp = logp + part_logp
            start += n
        return actions, np.asarray(logp, dtype=np.float32)


def nvec_of(space: spaces.MultiDiscrete | spaces.MultiBinary) -> np.ndarray:
    """Categories per column: MultiDiscrete's nvec, flattened, or 2 per MultiBinary column."""
    if isinstance(space, spaces.MultiBinary):
        return np.full(int(np.prod(space.shape)), 2)
    return np.asarray(space.nvec).reshape(-1)


@functools.cache
def multi_categorical(nvec: tuple[int, ...]) -> type[MultiCategorical]:
    """The ``MultiCategorical`` class for one ``nvec`` (made once per ``nvec``)."""
    return type(f"MultiCategorical{list(nvec)}", (MultiCategorical,), {"NVEC": nvec})


class ActionDistribution:
    """A batch of action distributions on the numpy inference path: what exploration sees.

    ``inputs`` are the network's outputs (logits, Q-values, or means and log stds);
    ``sample()`` and ``deterministic_sample()`` return ``(actions, logp)``. ``valid`` is the
    ``[B, n]`` action mask when the observation holds one (masked inputs are already very
    negative; exploration's random actions read it), else ``None``.
    """

    __slots__ = ("dist_class", "inputs", "rng", "valid")

    def __init__(self, dist_class: type, inputs: np.ndarray, rng: np.random.Generator) -> None:
        self.dist_class = dist_class
        self.inputs = inputs
        self.rng = rng
        self.valid: np.ndarray | None = None

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        return self.dist_class.sample_numpy(self.inputs, True, self.rng)

    def deterministic_sample(self) -> tuple[np.ndarray, np.ndarray]:
        return self.dist_class.sample_numpy(self.inputs, False, self.rng)

    def with_inputs(self, inputs: np.ndarray) -> ActionDistribution:
        """The same kind of distribution over other inputs (e.g. Q-values over a temperature)."""
        other = ActionDistribution(self.dist_class, inputs, self.rng)
        other.valid = self.valid
        return other


def _logp_of_last(dist: Categorical | DiagGaussian) -> torch.Tensor:
    if dist.last_sample is None:
        raise ValueError("sampled_action_logp(): call sample() first")
    return dist.log_prob(dist.last_sample)


@functools.cache
def _rows(size: int) -> np.ndarray:
    """``arange(size)`` for fancy indexing one element per row, built once per batch size."""
    return np.arange(size)
