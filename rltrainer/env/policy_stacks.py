"""Several policies' actions in one compiled call: a ``MultiAgentEnvRunner`` step's inference
when agents act with different policies of one architecture (e.g. one policy per agent).

``Policy.compute`` runs one policy on its rows; with one policy per agent each call has a row or
two, and the per-call overhead (numpy's small-array calls, the sampling) is most of a step.
A ``PolicyStack`` holds copies of its policies' MLP parameters stacked along a new first axis
(``[P, out, in]`` per layer) and computes the actions of every row of every policy in one
``stacked_mlp_categorical_sample`` kernel call: the same operations per row as that policy's
``mlp_categorical_sample``, its uniforms drawn from the policy's own generator in the order
``compute`` draws them. The copies follow the parameters: before each call the stack compares
the torch parameters' version counters (bumped by every in-place write through them:
``load_state_dict``, ``torch.optim`` steps) with those of its last copy, and copies again when
they moved. A learner's optimizer writes its flat buffer (``FlatParameters``), which bumps no
parameter's counter: an algorithm whose driver policies share the learners' modules calls
``MultiAgentEnvRunner.weights_written_in_place()`` after each update instead.

Only policies whose ``compute`` would take the plain compiled path qualify (``eligible``):
``Policy.compute`` itself (not overridden, no custom ``compute_actions``), no recurrence,
``StochasticSampling`` over a ``Categorical`` from a ``NumpyMLP`` with compiled arguments, no
action rescaling, and numba available. Policies are stacked with others of the same layer
shapes and activations. See docs/design/multi-agent.md.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from rltrainer.core import compiled
from rltrainer.policy.policy import Policy

_VERSION = attrgetter("_version")


def eligible(policy: Any) -> bool:
    """Whether ``policy``'s exploring and greedy actions may come from a stack (see above)."""
    mlp = getattr(policy, "_numpy_policy", None)
    return (
        type(policy).compute is Policy.compute
        and not getattr(policy, "custom_compute", False)
        and not policy.recurrent
        and policy._samples_from_mlp
        and getattr(mlp, "compiled_args", None) is not None
        and getattr(mlp, "tensors", None) is not None
        and policy._rescale is None
    )


def architecture(policy: Any) -> tuple[Any, ...]:
    """What policies share to be stacked: each layer's weight shape and activation code."""
    weights, _, codes = policy._numpy_policy.compiled_args
    return (tuple(w.shape for w in weights), codes)


class PolicyStack:
    """Policies of one architecture, their MLP parameters stacked (see the module docstring)."""

    def __init__(self, policies: list[Any]) -> None:
        self.policies = policies
        self.mlps = [policy._numpy_policy for policy in policies]
        """The ``NumpyMLP`` each copy came from (a rebuilt one means a new stack)."""
        weights, biases, self.codes = self.mlps[0].compiled_args
        count = len(policies)
        self.weights = tuple(np.empty((count, *w.shape), dtype=np.float32) for w in weights)
        self.biases = tuple(np.empty((count, *b.shape), dtype=np.float32) for b in biases)
        self.out_size = self.mlps[0].out_size
        self._tensors = [t for mlp in self.mlps for t in mlp.tensors]
        self._versions: list[int] | None = None
        self.kernels = compiled.kernels()

    def current(self) -> bool:
        """Whether the policies still infer with the MLPs stacked here."""
        return all(policy._numpy_policy is mlp for policy, mlp in zip(self.policies, self.mlps, strict=True))

    def invalidate(self) -> None:
        """Copy the parameters again before the next call (they changed without a version bump)."""
        self._versions = None

    def _refresh(self) -> None:
        versions = list(map(_VERSION, self._tensors))
        if versions == self._versions:
            return
        for slot, mlp in enumerate(self.mlps):
            weights, biases, _ = mlp.compiled_args
            for layer, (w, b) in enumerate(zip(weights, biases, strict=True)):
                self.weights[layer][slot] = w
                self.biases[layer][slot] = b
        self._versions = versions

    def compute(
        self, rows: np.ndarray, starts: list[int], slots: list[int], explore: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions, logp)`` of ``rows``: rows ``starts[k]:starts[k + 1]`` act with the policy
        in slot ``slots[k]``; each policy's uniforms come from its own generator."""
        self._refresh()
        total = len(rows)
        uniforms = np.empty(total, dtype=np.float32)
        if explore:
            for k, slot in enumerate(slots):
                self.policies[slot].rng.random(dtype=np.float32, out=uniforms[starts[k] : starts[k + 1]])
        logits = np.empty((total, self.out_size), dtype=np.float32)
        actions, logp = np.empty(total, dtype=np.int64), np.empty(total, dtype=np.float32)
        self.kernels.stacked_mlp_categorical_sample(
            rows,
            np.array(starts, dtype=np.int64),
            np.array(slots, dtype=np.int64),
            self.weights,
            self.biases,
            self.codes,
            uniforms,
            explore,
            logits,
            actions,
            logp,
        )
        return actions, logp


def build_stacks(policy_map: dict[str, Any]) -> dict[str, tuple[PolicyStack, int]]:
    """``{policy id: (its stack, its slot)}`` for the eligible policies that share an
    architecture with another one (a policy alone gains nothing); empty without numba."""
    if compiled.kernels() is None:
        return {}
    groups: dict[tuple[Any, ...], list[str]] = {}
    for pid, policy in policy_map.items():
        if eligible(policy):
            groups.setdefault(architecture(policy), []).append(pid)
    where: dict[str, tuple[PolicyStack, int]] = {}
    for pids in groups.values():
        if len(pids) > 1:
            stack = PolicyStack([policy_map[pid] for pid in pids])
            where.update({pid: (stack, slot) for slot, pid in enumerate(pids)})
    return where


def observation_groups(policy_map: dict[str, Any]) -> dict[str, int]:
    """``{policy id: group}`` for policies whose observations flatten alike (equal spaces, not
    Dict or Tuple: one ``Preprocessor.transform`` call serves them all); only groups of two or
    more policies are listed."""
    spaces_seen: list[Any] = []
    group_of: dict[str, int] = {}
    for pid, policy in policy_map.items():
        space = policy.preprocessor.space
        if isinstance(space, gym_spaces.Dict | gym_spaces.Tuple):
            continue
        for index, seen in enumerate(spaces_seen):
            if seen == space:
                group_of[pid] = index
                break
        else:
            group_of[pid] = len(spaces_seen)
            spaces_seen.append(space)
    sizes: dict[int, int] = {}
    for group in group_of.values():
        sizes[group] = sizes.get(group, 0) + 1
    return {pid: group for pid, group in group_of.items() if sizes[group] > 1}


__all__ = ["PolicyStack", "architecture", "build_stacks", "eligible", "observation_groups"]
