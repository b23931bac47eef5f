"""DDPG's and TD3's configs; they import no torch (the operator validates experiments with them).

TD3 is DDPG with three switches on (Fujimoto et al. 2018): twin critics (``twin_q``), delayed
actor and target updates (``policy_delay``) and target policy smoothing
(``smooth_target_policy``, ``target_noise``, ``target_noise_clip``), so one config class
holds both, with RLlib's defaults for each.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from rltrainer.algorithms.algorithm_config import Activation, AlgorithmConfig, LayerSizes
from rltrainer.algorithms.dqn.off_policy_config import OffPolicyConfig
from rltrainer.errors import ConfigError


class DDPGConfig(OffPolicyConfig):
    """Deep deterministic policy gradients (Lillicrap et al. 2016); defaults follow RLlib's DDPG
    (``lr`` is not used: ``actor_lr`` and ``critic_lr`` are)."""

    ALGORITHM = "DDPG"
    STAT_KEYS = ("critic_loss", "actor_loss", "mean_q", "max_q", "min_q")
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + OffPolicyConfig.OFF_POLICY_TRAINING
        + (
            "twin_q",
            "policy_delay",
            "smooth_target_policy",
            "target_noise",
            "target_noise_clip",
            "actor_hiddens",
            "actor_hidden_activation",
            "critic_hiddens",
            "critic_hidden_activation",
            "actor_lr",
            "critic_lr",
            "use_huber",
            "huber_threshold",
            "l2_reg",
        ),
    }

    twin_q: bool = False
    """Two critics and the minimum of their targets (TD3's clipped double Q)."""
    policy_delay: int = Field(1, ge=1)
    """Critic updates per actor (and target) update: TD3's delayed policy updates."""
    smooth_target_policy: bool = False
    """Add clipped Gaussian noise to the target actor's actions (TD3's target smoothing)."""
    target_noise: float = Field(0.2, ge=0)
    """Standard deviation of the target smoothing noise, in [-1, 1] action units."""
    target_noise_clip: float = Field(0.5, ge=0)
    """The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    actor_hiddens: LayerSizes = Field(default_factory=lambda: [400, 300])
    """The actor's hidden layers."""
    actor_hidden_activation: Activation = "relu"
    critic_hiddens: LayerSizes = Field(default_factory=lambda: [400, 300])
    """Each critic's hidden layers (over the observation and action, concatenated)."""
    critic_hidden_activation: Activation = "relu"
    actor_lr: float = Field(1e-3, gt=0)
    critic_lr: float = Field(1e-3, gt=0)
    use_huber: bool = False
    """Huber loss for the critics instead of the squared error."""
    huber_threshold: float = Field(1.0, gt=0)
    l2_reg: float = Field(1e-6, ge=0)
    """Weight decay on the critics' weights (RLlib adds it to the critic loss)."""
    tau: float = Field(2e-3, gt=0, le=1)
    """Polyak averaging of the target actor and critics."""
    target_network_update_freq: int = Field(0, ge=0)
    """Env steps between target updates (0: at every actor update)."""
    train_batch_size: int = Field(256, ge=1)
    num_steps_sampled_before_learning_starts: int = Field(1500, ge=0)
    rollout_fragment_length: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    min_sample_timesteps_per_iteration: int = Field(1000, ge=0)
    exploration_config: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "OrnsteinUhlenbeckNoise",
            "random_timesteps": 1000,
            "ou_base_scale": 0.1,
            "ou_theta": 0.15,
            "ou_sigma": 0.2,
            "initial_scale": 1.0,
            "final_scale": 0.02,
            "scale_timesteps": 10_000,
        }
    )
    """See ``AlgorithmConfig.exploration_config``; DDPG adds Ornstein-Uhlenbeck noise."""

    def validate(self) -> None:
        super().validate()
        if self.num_learners > 0:
            raise ConfigError(f"{self.ALGORITHM} trains in the driver: set num_learners=0")
        if self.smooth_target_policy and self.target_noise_clip == 0 and self.target_noise > 0:
            raise ConfigError(
                "target_noise_clip=0 clips all target smoothing noise away; set "
                "smooth_target_policy=False or a target_noise_clip > 0"
            )


class TD3Config(DDPGConfig):
    """Twin delayed DDPG (Fujimoto et al. 2018); defaults follow RLlib's TD3."""

    ALGORITHM = "TD3"

    twin_q: bool = True
    policy_delay: int = Field(2, ge=1)
    smooth_target_policy: bool = True
    l2_reg: float = Field(0.0, ge=0)
    tau: float = Field(5e-3, gt=0, le=1)
    train_batch_size: int = Field(100, ge=1)
    num_steps_sampled_before_learning_starts: int = Field(10_000, ge=0)
    replay_buffer_config: dict[str, Any] = Field(
        default_factory=lambda: {"type": "ReplayBuffer", "capacity": 1_000_000}
    )
    exploration_config: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "GaussianNoise",
            "random_timesteps": 10_000,
            "stddev": 0.1,
            "initial_scale": 1.0,
            "final_scale": 1.0,
            "scale_timesteps": 1,
        }
    )
    """See ``AlgorithmConfig.exploration_config``; TD3 adds Gaussian noise of a fixed scale."""
