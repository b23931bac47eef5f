"""Weights set on the driver's policies reach the learners and every env runner.

In RLlib the driver's local policy is the one that learns, so ``algo.get_policy().set_weights(w)``
(the documents' way to load weights), ``algo.workers.local_worker().set_weights(w)`` and
``algo.workers.foreach_policy(...)`` change what the next ``train()`` trains. Here the learner
trains its own copy of the network and the env runners act with copies of the learner's weights,
so weights set on the driver's policies would be overwritten by the next sync. ``DriverWeights``
notices them instead: torch bumps a tensor's version counter on every in-place change
(``load_state_dict`` copies into the parameters), so comparing the driver's parameter versions
with those after the algorithm's own last sync tells, without copying any weights, whether
someone changed them in between; then they go to the learners and every env runner before the
next training step samples.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rltrainer.core.learner_group import LearnerGroup
    from rltrainer.policy.policy import Policy


def driver_policies(algo: Any) -> dict[str, Policy]:
    """``{policy id: policy}`` of the driver's env runner (the policies users reach)."""
    local = algo.env_runner_group.local_worker()
    return dict(local.policy_map) if algo._multi_agent else {"default_policy": local.policy}


def learner_groups(algo: Any) -> dict[str, LearnerGroup]:
    """``{policy id: LearnerGroup}`` of the policies that learn."""
    return dict(algo.learner_group.groups) if algo._multi_agent else {"default_policy": algo.learner_group}


def learner_modules_shareable(algo: Any) -> bool:
    """Whether the driver's env runner may act with the learners' modules themselves: sampling
    and training both in the driver (no remote env runners or learners) on the CPU. Its numpy
    inference then views the learners' parameters, so every optimizer step is seen and no
    weights are copied after an update (``Policy.share_model``)."""
    cfg, group = algo.config, algo.learner_group
    learners = group.local_learners.values() if algo._multi_agent else [group.local_learner]
    return (
        cfg.num_env_runners == 0
        and cfg.num_learners == 0
        and all(learner.device.type == "cpu" for learner in learners)
    )


def act_with_learner_modules(algo: Any) -> bool:
    """After an update: whether the driver's env runner acts with the learners' modules
    themselves, so that no weights need copying (where ``learner_modules_shareable``, decided
    at the first call). Each learning policy is made to act with its learner's module (again
    for a policy added or a learner rebuilt since), and a multi-agent runner's stacked copies
    of the parameters are marked stale (the optimizers' steps bump no version counter)."""
    shared = getattr(algo, "_acts_with_learner_modules", None)
    if shared is None:
        shared = algo._acts_with_learner_modules = learner_modules_shareable(algo)
    if not shared:
        return False
    policies = driver_policies(algo)
    for pid, group in learner_groups(algo).items():
        module = group.local_learner.module
        if pid in policies and policies[pid].model is not module:
            policies[pid].share_model(module)
    if algo._multi_agent:
        algo.env_runner_group.local_worker().weights_written_in_place()
    return True


def _versions(policies: dict[str, Policy]) -> dict[str, tuple[int, ...]]:
    return {
        pid: tuple(t._version for t in itertools.chain(p.model.parameters(), p.model.buffers()))
        for pid, p in policies.items()
    }


class DriverWeights:
    """Tracks the driver's policy weights between training steps (see the module docstring)."""

    def __init__(self, algo: Any) -> None:
        self._algo = algo
        self._seen: dict[str, tuple[int, ...]] = {}
        self.mark_synced()

    def mark_synced(self) -> None:
        """The driver's weights are the algorithm's own now (after a training step or a restore)."""
        self._seen = _versions(driver_policies(self._algo))

    def changed(self) -> list[str]:
        """The policies whose driver weights someone changed since ``mark_synced()``."""
        now = _versions(driver_policies(self._algo))
        return [pid for pid, versions in now.items() if self._seen.get(pid) != versions]

    def push_if_changed(self) -> None:
        """Send weights set on the driver's policies to the learners and env runners."""
        changed = self.changed()
        if changed:
            policies = driver_policies(self._algo)
            self.push({pid: policies[pid].get_weights() for pid in changed})

    def push(self, weights: dict[str, dict[str, Any]]) -> None:
        """``{policy id: weights}`` into the learners that train those policies (optimizer
        state kept, as in RLlib), then to the driver's and every env runner's policies."""
        algo = self._algo
        groups = learner_groups(algo)
        for pid, policy_weights in weights.items():
            group = groups.get(pid)
            if group is None:  # a frozen policy: only the env runners act with it
                continue
            state = dict(group.get_state())
            known = state["weights"]
            state["weights"] = {**known, **{k: v for k, v in policy_weights.items() if k in known}}
            group.set_state(state)
        local = algo.env_runner_group.local_worker()
        if algo._multi_agent:
            algo.env_runner_group.sync_weights({**local.get_weights(), **weights})
        else:
            algo.env_runner_group.sync_weights(weights["default_policy"])
        self.mark_synced()


def get_weights(algo: Any, policies: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{policy id: {parameter name: array}}`` of the driver's policies (all, or those named)."""
    return {
        pid: policy.get_weights()
        for pid, policy in driver_policies(algo).items()
        if policies is None or pid in policies
    }


def set_weights(algo: Any, weights: dict[str, dict[str, Any]]) -> None:
    """Load ``{policy id: weights}`` into the driver's policies, the learners and every env runner."""
    from rltrainer.errors import ConfigError

    policies = driver_policies(algo)
    unknown = sorted(set(weights) - set(policies))
    if unknown:
        raise ConfigError(
            f"set_weights: no policy {', '.join(map(repr, unknown))}; this algorithm's policies: "
            f"{', '.join(policies)} (weights go as {{policy_id: {{name: array}}}})"
        )
    for pid, policy_weights in weights.items():  # checks names and shapes before any learner changes
        policies[pid].set_weights(policy_weights)
    algo._driver_weights.push(dict(weights))
