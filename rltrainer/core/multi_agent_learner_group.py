"""``MultiAgentLearnerGroup``: one ``LearnerGroup`` per trainable policy, behind one interface.

Each trainable policy has its own module, optimizer and config (its ``PolicySpec.config``
applied), and its own learner actors when ``num_learners > 0`` (DDP within the policy; the
policies' actors share the learner bundles, each asking for its share of them). Updates,
weights and state are dicts keyed by policy id; PPO's training step calls ``update`` exactly as
it does on a single ``LearnerGroup``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rltrainer.core.denormals import flush_denormals
from rltrainer.core.learner import Learner
from rltrainer.core.learner_group import LearnerGroup
from rltrainer.errors import ConfigError


class MultiAgentLearnerGroup:
    """The learners of every trainable policy of a multi-agent algorithm."""

    def __init__(self, make_group: Callable[[str, int], LearnerGroup], policy_ids: list[str]) -> None:
        """``make_group(policy_id, num_policies)``: that policy's ``LearnerGroup`` (the count sets
        each policy's share of the learner bundles)."""
        self._make_group = make_group
        self.agent_steps_trained = 0
        """Agent steps the policies were updated on, over the run."""
        self.groups: dict[str, LearnerGroup] = {}
        try:
            for pid in policy_ids:
                self.groups[pid] = make_group(pid, len(policy_ids))
        except BaseException:
            self.stop()
            raise

    # --- policies ----------------------------------------------------------------------
    @property
    def policy_ids(self) -> list[str]:
        return list(self.groups)

    def add_policy(self, policy_id: str, weights: dict[str, Any] | None = None) -> None:
        """Start learning ``policy_id`` (from ``weights``, else its fresh initialization)."""
        group = self._make_group(policy_id, len(self.groups) + 1)
        if weights is not None:
            group.local_learner.set_weights(weights)
            if group.config.num_learners:
                group.set_state(group.get_state_of(group.local_learner))
        self.groups[policy_id] = group

    def remove_policy(self, policy_id: str) -> None:
        group = self.groups.pop(policy_id, None)
        if group is not None:
            group.stop()

    @property
    def local_learners(self) -> dict[str, Learner]:
        return {pid: group.local_learner for pid, group in self.groups.items()}

    @property
    def local_learner(self) -> Learner:
        """The only policy's learner (``ConfigError`` with several: use ``local_learners``)."""
        if len(self.groups) == 1:
            return next(iter(self.groups.values())).local_learner
        raise ConfigError(f"{len(self.groups)} policies learn: use local_learners[policy_id]")

    @property
    def num_restarts(self) -> int:
        return sum(group.num_restarts for group in self.groups.values())

    # --- training ----------------------------------------------------------------------
    @flush_denormals()
    def update(self, batches: list[Any], timestep: int) -> dict[str, dict[str, float]]:
        """Update each trainable policy on its rollouts of ``batches`` (``MultiAgentBatch``es);
        returns ``{policy id: stats}`` for the policies that had data."""
        by_policy = {}
        for pid in self.groups:
            rollouts = [batch.policy_batches[pid] for batch in batches if pid in batch.policy_batches]
            if rollouts:
                by_policy[pid] = rollouts
        stats = {}
        for stack in self._stacks(list(by_policy)):
            if len(stack) == 1:  # alone: its own LearnerGroup, as ever
                stats[stack[0]] = self.groups[stack[0]].update(by_policy[stack[0]], timestep)
                continue
            learners = [self.groups[pid].local_learner for pid in stack]
            results = type(learners[0]).update_stacked(learners, [by_policy[pid] for pid in stack], timestep)
            stats.update(zip(stack, results, strict=True))
        for rollouts in by_policy.values():
            self.agent_steps_trained += sum(rollout.num_steps for rollout in rollouts)
        return {pid: stats[pid] for pid in by_policy}

    def _stacks(self, policy_ids: list[str]) -> list[list[str]]:
        """``policy_ids`` in groups updated together (``Learner.stack_key``: the policies of one
        architecture and settings, trained in the driver), each at its first member's place."""
        stacks: dict[Any, list[str]] = {}
        for pid in policy_ids:
            group = self.groups[pid]
            key = None if group.config.num_learners else group.local_learner.stack_key()
            stacks.setdefault(pid if key is None else (type(group.local_learner), key), []).append(pid)
        return list(stacks.values())

    def update_policy(self, policy_id: str, batch: Any, timestep: int, num_rows: int) -> dict[str, float]:
        """One update of ``policy_id`` on an already built batch of ``num_rows`` agent steps
        (the off-policy step's replayed transitions)."""
        self.agent_steps_trained += num_rows
        return self.groups[policy_id].update(batch, timestep)

    def get_weights(self) -> dict[str, dict[str, Any]]:
        return {pid: group.get_weights() for pid, group in self.groups.items()}

    def foreach_learner(self, fn: Callable[[Learner], Any]) -> list[Any]:
        return [result for group in self.groups.values() for result in group.foreach_learner(fn)]

    # --- checkpoint state ---------------------------------------------------------------
    def get_state(self) -> dict[str, dict[str, Any]]:
        return {pid: group.get_state() for pid, group in self.groups.items()}

    def set_state(self, state: dict[str, dict[str, Any]]) -> None:
        for pid, policy_state in state.items():
            if pid in self.groups:
                self.groups[pid].set_state(policy_state)

    def stop(self) -> None:
        for group in self.groups.values():
            group.stop()


__all__ = ["MultiAgentLearnerGroup"]
