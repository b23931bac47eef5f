"""What DQN and SAC share: replay settings and the off-policy training step.

One training step: sample one round from the env runners and add it to the replay buffer
as n-step transitions; once ``num_steps_sampled_before_learning_starts`` env steps were
sampled, take as many gradient steps on replayed batches as ``training_intensity`` asks
for (updating priorities); then sync the acting weights to the env runners.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pydantic import Field

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.checkpoints import Checkpoint
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.utils.replay_buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    check_replay_buffer_config,
    make_replay_buffer,
    transitions_from_rollout,
)

BUFFER_FILE = "replay_buffer.npz"


class OffPolicyConfig(AlgorithmConfig):
    """Replay, target-network and update-ratio settings (RLlib's names and meanings)."""

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
        try:
            buffer_class, _, _ = check_replay_buffer_config(self.replay_buffer_config)
        except ValueError as err:
            raise ConfigError(f"training(): {err}") from None
        if issubclass(buffer_class, PrioritizedReplayBuffer) and self.num_learners > 0:
            raise ConfigError(
                "a prioritized replay buffer needs the TD errors of the driver's learner: use "
                "num_learners=0 or replay_buffer_config={'type': 'ReplayBuffer'}"
            )


class OffPolicyAlgorithm(Algorithm):
    """Replay-based training step; subclasses set the learner (the losses) and policy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        policy = self.get_policy()
        box = isinstance(self.action_space, spaces.Box)
        self.replay_buffer: ReplayBuffer = make_replay_buffer(
            cfg.replay_buffer_config,
            obs_shape=(policy.preprocessor.size,),
            action_shape=self.action_space.shape if box else (),
            action_dtype=np.float32 if box else np.int64,
            seed=cfg.seed,
        )
        self._update_credit = 0.0  # fractional gradient steps owed under training_intensity
        # Sampling and training both in the driver on the CPU: the local env runner acts with the
        # learner's module itself (numpy views of its parameters), so nothing is copied per step.
        learner = self.learner_group.local_learner
        self._shared_module = (
            cfg.num_env_runners == 0 and cfg.num_learners == 0 and learner.device.type == "cpu"
        )
        if self._shared_module:
            policy.share_model(learner.module)
        self._last_stats: dict[str, float] = {k: float("nan") for k in self.learner_class.STAT_KEYS}

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        self._sync_global_timestep()
        # 1. sample one round and store it as n-step transitions
        rollouts = self.sample_rollouts(min_steps=1)
        sampled = 0
        for rollout in rollouts:
            self.replay_buffer.add(transitions_from_rollout(rollout, cfg.n_step, cfg.gamma))
            sampled += rollout.num_steps
        if self.counters.timesteps_total < cfg.num_steps_sampled_before_learning_starts:
            return self._last_stats
        # 2. update on replayed batches
        if cfg.training_intensity is None:
            num_updates = 1
        else:
            self._update_credit += sampled * cfg.training_intensity / cfg.train_batch_size
            num_updates = int(self._update_credit)
            self._update_credit -= num_updates
        prioritized = isinstance(self.replay_buffer, PrioritizedReplayBuffer)
        learner = self.learner_group.local_learner
        for _ in range(num_updates):
            batch = self.replay_buffer.sample(cfg.train_batch_size)
            self._last_stats = self.learner_group.update(batch, timestep=self.counters.timesteps_total)
            if prioritized:
                self.replay_buffer.update_priorities(batch.indices, learner.last_td_errors)
            self.counters.num_env_steps_trained += cfg.train_batch_size
        # 3. sync the acting weights
        if num_updates and not self._shared_module:
            self.env_runner_group.sync_weights(learner.get_policy_weights())
        return self._last_stats

    def _sync_global_timestep(self) -> None:
        """Exploration schedules follow the algorithm's env steps, in every env runner."""
        timestep = self.counters.timesteps_total
        self.env_runner_group.local_worker().set_global_timestep(timestep)
        for runner in self.env_runner_group.remote_workers:
            if runner is not None:  # fire and forget: it runs before the runner's next sample
                runner.set_global_timestep.remote(timestep)

    # --- the replay buffer in checkpoints (checkpointing(store_buffer_in_checkpoints=True)) ---
    def checkpoint_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        if not self.config.store_buffer_in_checkpoints:
            return {}
        state = self.replay_buffer.get_state()
        return {BUFFER_FILE: {k: np.asarray(v) for k, v in state.items()}}

    def restore_arrays(self, checkpoint: Checkpoint) -> None:
        if BUFFER_FILE not in checkpoint.metadata["files"] or not self.config.store_buffer_in_checkpoints:
            return
        try:
            self.replay_buffer.set_state(checkpoint.arrays(BUFFER_FILE))
        except (KeyError, ValueError) as err:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r}: cannot restore the replay buffer ({err})"
            ) from None
