"""What DQN and SAC share: the off-policy training step (their replay settings: ``off_policy_config``).

One training step: sample one round from the env runners and add it to the replay buffer
as n-step transitions; once ``num_steps_sampled_before_learning_starts`` env steps were
sampled, take as many gradient steps on replayed batches as ``training_intensity`` asks
for (updating priorities); then sync the acting weights to the env runners.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn.off_policy_config import OffPolicyConfig
from rltrainer.algorithms.driver_weights import learner_modules_shareable
from rltrainer.checkpoints import Checkpoint
from rltrainer.errors import CheckpointError
from rltrainer.utils.replay_buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    make_replay_buffer,
    transitions_from_rollout,
)

BUFFER_FILE = "replay_buffer.npz"


class OffPolicyAlgorithm(Algorithm):
    """Replay-based training step; subclasses set the learner (the losses) and policy."""

    def setup(self, config: Any) -> None:
        super().setup(config)
        cfg = self.config
        self._update_credit = 0.0  # fractional gradient steps owed under training_intensity
        if self._multi_agent:
            self._setup_multi_agent()
            return
        policy = self.get_policy()
        self.replay_buffer: ReplayBuffer = self.make_buffer(policy, cfg)
        # Sampling and training both in the driver on the CPU: the local env runner acts with the
        # learner's module itself (numpy views of its parameters), so nothing is copied per step.
        self._shared_module = learner_modules_shareable(self)
        if self._shared_module:
            policy.share_model(self.learner_group.local_learner.module)
        self._last_stats: dict[str, float] = {k: float("nan") for k in self.learner_class.STAT_KEYS}

    @staticmethod
    def make_buffer(policy: Any, cfg: Any) -> ReplayBuffer:
        """The replay buffer for ``policy``'s rows and actions, as ``cfg`` configures it."""
        box = isinstance(policy.action_space, spaces.Box)
        return make_replay_buffer(
            cfg.replay_buffer_config,
            obs_shape=(policy.preprocessor.size,),
            # uint8 frames stay uint8 in the buffer (a MeanStdFilter's output is float32)
            obs_dtype=policy.preprocessor.dtype if cfg.observation_filter == "NoFilter" else np.float32,
            action_shape=policy.action_space.shape if box else (),
            action_dtype=np.float32 if box else np.int64,
            seed=cfg.seed,
        )

    def num_updates(self, sampled: int) -> int:
        """Gradient steps owed after sampling ``sampled`` steps (``training_intensity``)."""
        cfg = self.config
        if cfg.training_intensity is None:
            return 1
        self._update_credit += sampled * cfg.training_intensity / cfg.train_batch_size
        num_updates = int(self._update_credit)
        self._update_credit -= num_updates
        return num_updates

    def training_step(self) -> dict[str, float]:
        if self._multi_agent:
            return self._multi_agent_step()
        cfg = self.config
        self._sync_global_timestep()
        # 1. sample one round and store it as n-step transitions
        rollouts = self.sample_for_replay()
        sampled = 0
        for rollout in rollouts:
            self.replay_buffer.add(transitions_from_rollout(rollout, cfg.n_step, cfg.gamma))
            sampled += rollout.num_steps
        if self.counters.timesteps_total < cfg.num_steps_sampled_before_learning_starts:
            return self._last_stats
        # 2. update on replayed batches
        num_updates = self.num_updates(sampled)
        prioritized = isinstance(self.replay_buffer, PrioritizedReplayBuffer)
        learner = self.learner_group.local_learner
        with self.timed("learn"):
            for _ in range(num_updates):
                batch = self.replay_buffer.sample(cfg.train_batch_size)
                self._last_stats = self.learner_group.update(batch, timestep=self.counters.timesteps_total)
                if prioritized:
                    self.replay_buffer.update_priorities(batch.indices, learner.last_td_errors)
                self.counters.num_env_steps_trained += cfg.train_batch_size
        # 3. sync the acting weights
        if num_updates and not self._shared_module and self.weights_due():
            with self.timed("synch_weights"):
                self.env_runner_group.sync_weights(learner.get_policy_weights())
        return self._last_stats

    # --- multi-agent: a replay buffer per trainable policy ----------------------------------
    def _setup_multi_agent(self) -> None:
        self.replay_buffers: dict[str, ReplayBuffer] = {}
        # As for one policy: sampling and training in the driver on the CPU, the local runner acts
        # with the learners' modules themselves.
        self._shared_module = learner_modules_shareable(self)
        self._last_stats = {}
        self._match_buffers_to_learners()

    def _match_buffers_to_learners(self) -> None:
        """Policies added (``add_policy``) or removed at run time get or lose their buffer."""
        local = self.env_runner_group.local_worker()
        for pid, learner in self.learner_group.local_learners.items():
            if pid not in self.replay_buffers:
                self.replay_buffers[pid] = self.make_buffer(
                    local.get_policy(pid), self.learner_group.groups[pid].config
                )
                if self._shared_module:
                    local.get_policy(pid).share_model(learner.module)
        for pid in set(self.replay_buffers) - set(self.learner_group.policy_ids):
            del self.replay_buffers[pid]
            self._last_stats.pop(pid, None)

    def _multi_agent_step(self) -> dict[str, Any]:
        """The off-policy step per trainable policy: its agents' transitions into its buffer,
        then ``num_updates`` replayed batches of its own ``train_batch_size``."""
        self._sync_global_timestep()
        self._match_buffers_to_learners()
        batches = self.sample_for_replay()
        for pid, buffer in self.replay_buffers.items():
            cfg = self.learner_group.groups[pid].config
            for batch in batches:
                rollout = batch.policy_batches.get(pid)
                if rollout is not None:
                    buffer.add(transitions_from_rollout(rollout, cfg.n_step, cfg.gamma))
        if self.counters.timesteps_total < self.config.num_steps_sampled_before_learning_starts:
            return self._last_stats
        num_updates = self.num_updates(sum(batch.num_steps for batch in batches))
        with self.timed("learn"):
            for pid, buffer in self.replay_buffers.items():
                if len(buffer) == 0:
                    continue
                cfg = self.learner_group.groups[pid].config
                learner = self.learner_group.groups[pid].local_learner
                for _ in range(num_updates):
                    replayed = buffer.sample(cfg.train_batch_size)
                    timestep = self.counters.timesteps_total
                    self._last_stats[pid] = self.learner_group.update_policy(
                        pid, replayed, timestep, cfg.train_batch_size
                    )
                    if isinstance(buffer, PrioritizedReplayBuffer):
                        buffer.update_priorities(replayed.indices, learner.last_td_errors)
            self.counters.num_env_steps_trained += num_updates * self.config.train_batch_size
        if num_updates and self._shared_module:  # the stacked copies of the policies' parameters are stale
            self.env_runner_group.local_worker().weights_written_in_place()
        elif num_updates:
            with self.timed("synch_weights"):
                self.env_runner_group.sync_weights(
                    {
                        pid: learner.get_policy_weights()
                        for pid, learner in self.learner_group.local_learners.items()
                    }
                )
        return self._last_stats

    def sample_for_replay(self) -> list[Any]:
        """New rollouts for the replay buffer: one round of every env runner (Ape-X overrides
        it with asynchronous sampling)."""
        return self.sample_rollouts(min_steps=1)

    def weights_due(self) -> bool:
        """Whether the env runners get the new weights after this step's updates (always here)."""
        return True

    def _sync_global_timestep(self) -> None:
        """Exploration schedules follow the algorithm's env steps, in every env runner."""
        timestep = self.counters.timesteps_total
        self.env_runner_group.local_worker().set_global_timestep(timestep)
        for runner in self.env_runner_group.remote_workers:
            if runner is not None:  # fire and forget: it runs before the runner's next sample
                runner.set_global_timestep.remote(timestep)

    # --- the replay buffer in checkpoints (checkpointing(store_buffer_in_checkpoints=True)) ---
    def _buffers_by_file(self) -> dict[str, ReplayBuffer]:
        """Each replay buffer and its checkpoint file (``replay_buffer_<policy id>.npz`` per policy)."""
        if not self._multi_agent:
            return {BUFFER_FILE: self.replay_buffer}
        return {f"replay_buffer_{pid}.npz": buffer for pid, buffer in self.replay_buffers.items()}

    def checkpoint_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        if not self.config.store_buffer_in_checkpoints:
            return {}
        return {
            name: {k: np.asarray(v) for k, v in buffer.get_state().items()}
            for name, buffer in self._buffers_by_file().items()
        }

    def restore_arrays(self, checkpoint: Checkpoint) -> None:
        if not self.config.store_buffer_in_checkpoints:
            return
        for name, buffer in self._buffers_by_file().items():
            if name not in checkpoint.metadata["files"]:
                continue
            try:
                buffer.set_state(checkpoint.arrays(name))
            except (KeyError, ValueError) as err:
                raise CheckpointError(
                    f"checkpoint {checkpoint.source!r}: cannot restore the replay buffer {name} ({err})"
                ) from None


__all__ = ["BUFFER_FILE", "OffPolicyAlgorithm", "OffPolicyConfig"]
