"""The replay settings DQN and SAC share; it imports no torch (the operator validates with it)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import ConfigError
from rltrainer.utils.replay_buffers import PrioritizedReplayBuffer, check_replay_buffer_config


class OffPolicyConfig(AlgorithmConfig):
    """Replay, target-network and update-ratio settings (RLlib's names and meanings)."""

    SUPPORTS_MULTI_AGENT: ClassVar[bool] = True  # a replay buffer per trainable policy

    OFF_POLICY_TRAINING: ClassVar[tuple[str, ...]] = (
        "replay_buffer_config",
        "num_steps_sampled_before_learning_starts",
        "training_intensity",
        "n_step",
        "target_network_update_freq",
        "tau",
    )

    replay_buffer_config: dict[str, Any] = Field(
        default_factory=lambda: {
            "type": "PrioritizedReplayBuffer",
            "capacity": 50_000,
            "alpha": 0.6,
            "beta": 0.4,
        }
    )
    """``{"type": "ReplayBuffer" | "PrioritizedReplayBuffer" (or a subclass), "capacity", "alpha",
    "beta", "eps"}``; keys given update the current ones."""
    num_steps_sampled_before_learning_starts: int = Field(1000, ge=0)
    """Env steps sampled (into the buffer) before the first gradient step."""
    training_intensity: float | None = Field(None, gt=0)
    """Replayed samples trained on per env step sampled (gradient steps x ``train_batch_size``
    / env steps); ``None``: one gradient step per sampling round."""
    n_step: int = Field(1, ge=1)
    """Steps summed in the TD target before bootstrapping."""
    target_network_update_freq: int = Field(500, ge=0)
    """Update the target network(s) after a gradient step once this many env steps were sampled
    since the last update (0: after every gradient step)."""
    tau: float = Field(1.0, gt=0, le=1)
    """Target update ``target = tau * online + (1 - tau) * target``: 1 is a hard copy."""
    train_batch_size: int = Field(32, ge=1)
    """Transitions per gradient step, replayed from the buffer."""
    rollout_fragment_length: Annotated[int, Field(ge=1)] | Literal["auto"] = 4
    """Steps per env per sampling round ("auto": 4)."""
    min_sample_timesteps_per_iteration: int = Field(1000, ge=0)
    """Repeat training steps within one ``train()`` until this many env steps were sampled."""

    def get_rollout_fragment_length(self) -> int:
        return 4 if self.rollout_fragment_length == "auto" else self.rollout_fragment_length

    def _update(self, section: str, kwargs: dict[str, Any], allowed: tuple[str, ...] | None = None):
        # replay_buffer_config updates the current settings key by key, as in RLlib.
        if isinstance(kwargs.get("replay_buffer_config"), dict):
            kwargs = dict(kwargs)
            kwargs["replay_buffer_config"] = {**self.replay_buffer_config, **kwargs["replay_buffer_config"]}
        return super()._update(section, kwargs, allowed)

    def validate(self) -> None:
        super().validate()
        if self.model.use_lstm:
            raise ConfigError(
                f"model.use_lstm: {self.ALGORITHM} has no recurrent models (PPO has); remove use_lstm, "
                "or stack past observations into the observation (e.g. gymnasium.wrappers."
                "FrameStackObservation)"
            )
        try:
            buffer_class, _, _ = check_replay_buffer_config(self.replay_buffer_config)
        except ValueError as err:
            raise ConfigError(f"training(): {err}") from None
        if issubclass(buffer_class, PrioritizedReplayBuffer) and self.num_learners > 0:
            raise ConfigError(
                "a prioritized replay buffer needs the TD errors of the driver's learner: use "
                "num_learners=0 or replay_buffer_config={'type': 'ReplayBuffer'}"
            )
