"""DQN's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from rltrainer.algorithms.algorithm_config import AlgorithmConfig, LayerSizes
from rltrainer.algorithms.dqn.off_policy_config import OffPolicyConfig


class DQNConfig(OffPolicyConfig):
    """DQN's settings; defaults follow RLlib's DQN."""

    ALGORITHM = "DQN"
    STAT_KEYS = ("qf_loss", "qf_mean", "td_error_abs_mean", "cur_lr")
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + OffPolicyConfig.OFF_POLICY_TRAINING
        + ("double_q", "dueling", "hiddens", "td_error_loss_fn"),
    }

    double_q: bool = True
    """Double Q-learning: the online network picks the next action, the target network values it."""
    dueling: bool = True
    """Dueling heads: ``Q = V + A - mean(A)``."""
    hiddens: LayerSizes = Field(default_factory=lambda: [256])
    """Hidden layers of the Q (and value) heads, after the ``model.fcnet_hiddens`` trunk."""
    td_error_loss_fn: str = "huber"
    """``"huber"`` (delta 1) or ``"mse"``."""
    lr: Any = 5e-4
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    grad_clip: float | None = Field(40.0, gt=0)
    """Clip gradients (see ``grad_clip_by``); ``None`` disables clipping."""
    exploration_config: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "EpsilonGreedy",
            "initial_epsilon": 1.0,
            "final_epsilon": 0.02,
            "epsilon_timesteps": 10_000,
        }
    )
    """See ``AlgorithmConfig.exploration_config``; DQN explores epsilon-greedily."""

    @field_validator("td_error_loss_fn")
    @classmethod
    def _loss_fn(cls, name: str) -> str:
        if name not in ("huber", "mse"):
            raise ValueError("must be 'huber' or 'mse'")
        return name
