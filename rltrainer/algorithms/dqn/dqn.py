"""Deep Q-Networks: config, policy and algorithm (the training step is the off-policy one).

Double Q (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step returns,
prioritized replay (Schaul et al. 2016), hard or soft target updates, Huber loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pydantic import Field, field_validator

from rltrainer.algorithms.algorithm_config import AlgorithmConfig, LayerSizes
from rltrainer.algorithms.dqn.dqn_learner import DQNLearner, DQNModule
from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from rltrainer.core.distributions import Categorical
from rltrainer.errors import ConfigError
from rltrainer.policy import Policy


class DQNConfig(OffPolicyConfig):
    """DQN's settings; defaults follow RLlib's DQN."""

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

    def __init__(self, algo_class: type | None = None, **data: Any) -> None:
        super().__init__(algo_class or DQN, **data)

    @field_validator("td_error_loss_fn")
    @classmethod
    def _loss_fn(cls, name: str) -> str:
        if name not in ("huber", "mse"):
            raise ValueError("must be 'huber' or 'mse'")
        return name


class DQNPolicy(Policy):
    """Q-values as the distribution's inputs: greedy is argmax Q; exploration picks the rest."""

    def make_dist_class(self) -> type:
        if not isinstance(self.action_space, spaces.Discrete):
            raise ConfigError(
                f"DQN needs a Discrete action space, got {self.action_space}; use SAC for Box actions"
            )
        return Categorical

    def make_model(self) -> DQNModule:
        cfg = self.config
        return DQNModule(
            obs_size=self.preprocessor.size,
            num_actions=int(self.action_space.n),
            fcnet_hiddens=list(cfg.model.fcnet_hiddens),
            hiddens=list(cfg.hiddens),
            activation=cfg.model.fcnet_activation,
            dueling=cfg.dueling,
        )

    def extra_fetches(self, flat_obs: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ARG002
        return {
            "action_logp": out["action_logp"],
            "action_dist_inputs": out["action_dist_inputs"],
            "q_values": out["action_dist_inputs"],
        }


class DQN(OffPolicyAlgorithm):
    """DQN: sample into the replay buffer, replay batches through the learner, sync weights."""

    config_class = DQNConfig
    learner_class = DQNLearner
    policy_class = DQNPolicy
