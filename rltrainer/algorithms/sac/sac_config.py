"""SAC's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from rltrainer.algorithms.algorithm_config import AlgorithmConfig, ModelConfig
from rltrainer.algorithms.dqn.off_policy_config import OffPolicyConfig
from rltrainer.errors import ConfigError

OPTIMIZATION_KEYS = ("actor_learning_rate", "critic_learning_rate", "entropy_learning_rate")


def _network_config(value: dict[str, Any]) -> dict[str, Any]:
    """``{"fcnet_hiddens": [...], "fcnet_activation": ...}`` checked like ``model``."""
    unknown = sorted(set(value) - {"fcnet_hiddens", "fcnet_activation"})
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: fcnet_hiddens, fcnet_activation")
    checked = ModelConfig(**{"fcnet_hiddens": [256, 256], "fcnet_activation": "relu", **value})
    return {"fcnet_hiddens": checked.fcnet_hiddens, "fcnet_activation": checked.fcnet_activation}


class SACConfig(OffPolicyConfig):
    """SAC's settings; defaults follow RLlib's SAC (``lr`` is not used: see ``optimization_config``)."""

    ALGORITHM = "SAC"
    STAT_KEYS = ("critic_loss", "actor_loss", "alpha_loss", "alpha_value", "mean_q", "entropy")
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + OffPolicyConfig.OFF_POLICY_TRAINING
        + (
            "twin_q",
            "q_model_config",
            "policy_model_config",
            "optimization_config",
            "initial_alpha",
            "target_entropy",
        ),
    }

    twin_q: bool = True
    """Two critics and the minimum of their targets (clipped double Q)."""
    q_model_config: dict[str, Any] = Field(
        default_factory=lambda: {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
    )
    """The critics' layers: ``fcnet_hiddens``, ``fcnet_activation``."""
    policy_model_config: dict[str, Any] = Field(
        default_factory=lambda: {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
    )
    """The actor's layers: ``fcnet_hiddens``, ``fcnet_activation``."""
    optimization_config: dict[str, float] = Field(
        default_factory=lambda: {key: 3e-4 for key in OPTIMIZATION_KEYS}
    )
    """Adam learning rates: ``actor_learning_rate``, ``critic_learning_rate``, ``entropy_learning_rate``."""
    initial_alpha: float = Field(1.0, gt=0)
    """The entropy temperature alpha before any tuning."""
    target_entropy: float | str = "auto"
    """Entropy alpha steers towards; ``"auto"``: -dim(actions) for Box, 0.98 log(n) for Discrete."""
    tau: float = Field(5e-3, gt=0, le=1)
    """Polyak averaging of the target critics: ``target = tau * online + (1 - tau) * target``."""
    target_network_update_freq: int = Field(0, ge=0)
    """Env steps between target updates (0: after every gradient step)."""
    train_batch_size: int = Field(256, ge=1)
    """Transitions per gradient step, replayed from the buffer."""
    num_steps_sampled_before_learning_starts: int = Field(1500, ge=0)
    """Env steps sampled (into the buffer) before the first gradient step."""
    replay_buffer_config: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "PrioritizedReplayBuffer",
            "capacity": 1_000_000,
            "alpha": 0.6,
            "beta": 0.4,
        }
    )
    """See ``OffPolicyConfig.replay_buffer_config``."""
    rollout_fragment_length: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    """Steps per env per sampling round."""
    min_sample_timesteps_per_iteration: int = Field(100, ge=0)
    """Repeat training steps within one ``train()`` until this many env steps were sampled."""

    @field_validator("q_model_config", "policy_model_config")
    @classmethod
    def _networks(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _network_config(value)

    @field_validator("optimization_config")
    @classmethod
    def _learning_rates(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(OPTIMIZATION_KEYS))
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; allowed: {', '.join(OPTIMIZATION_KEYS)}")
        merged = {key: 3e-4 for key in OPTIMIZATION_KEYS} | value
        if any(not v > 0 for v in merged.values()):
            raise ValueError("learning rates must be > 0")
        return merged

    @field_validator("target_entropy")
    @classmethod
    def _auto_or_number(cls, value: float | str) -> float | str:
        if isinstance(value, str) and value != "auto":
            raise ValueError('must be "auto" or a number')
        return value

    def validate(self) -> None:
        super().validate()
        if self.num_learners > 0:
            raise ConfigError("SAC trains in the driver: set num_learners=0")

    def get_target_entropy(self, discrete: bool, action_dims: int) -> float:
        """``target_entropy``, resolving "auto" (Haarnoja et al. 2018; Christodoulou 2019)."""
        if self.target_entropy != "auto":
            return float(self.target_entropy)
        return 0.98 * math.log(action_dims) if discrete else -float(action_dims)
