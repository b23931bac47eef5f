"""Multi-agent envs, mappings and policies the README, tests and manifests name by import path.

A manifest (``RLExperiment``) or a YAML config cannot hold a lambda or a class made on the fly,
so what a multi-agent experiment needs is here at module level:
``env: rltrainer.env.multi_agent_examples:MultiAgentCartPole`` and
``policy_mapping_fn: rltrainer.env.multi_agent_examples:policy_per_agent``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.env.multi_agent_env import make_multi_agent
from rltrainer.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from rltrainer.policy.policy import Policy


def _importable(cls: type, name: str) -> type:
    """``make_multi_agent``'s class under a module-level name (configs save it as a path)."""
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = __name__
    return cls


MultiAgentCartPole = _importable(make_multi_agent("CartPole-v1"), "MultiAgentCartPole")
"""``{"num_agents": N}`` independent CartPole-v1 copies, agents ``0..N-1``."""

MultiAgentPendulum = _importable(make_multi_agent("Pendulum-v1"), "MultiAgentPendulum")
"""``{"num_agents": N}`` independent Pendulum-v1 copies (continuous actions), agents ``0..N-1``."""


def policy_per_agent(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:  # noqa: ARG001
    """Agent ``i`` acts with policy ``"p<i>"`` (one policy per agent)."""
    return f"p{agent_id}"


def shared_policy(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:  # noqa: ARG001
    """Every agent acts with policy ``"shared"``."""
    return "shared"


def learner_vs_opponent(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:  # noqa: ARG001
    """Two-player games: the first player (``player_0``) is ``"learner"``, the other ``"opponent"``."""
    return "learner" if str(agent_id).endswith("0") else "opponent"


class RockPaperScissors(PettingZooEnv):
    """PettingZoo's rock-paper-scissors (turn-based AEC API), ``{"max_cycles": rounds}`` (15)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        import pettingzoo

        rounds = int((config or {}).get("max_cycles", 15))
        super().__init__(pettingzoo.make("aec", "classic/rps-v2", max_cycles=rounds))


class SimpleSpread(ParallelPettingZooEnv):
    """MPE's cooperative navigation (``mpe2``, PettingZoo's Parallel API): ``N`` agents cover
    ``N`` landmarks; ``{"N": 3, "max_cycles": 25}``, discrete actions."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        from mpe2 import simple_spread_v3

        config = config or {}
        n, cycles = int(config.get("N", 3)), int(config.get("max_cycles", 25))
        super().__init__(simple_spread_v3.parallel_env(N=n, max_cycles=cycles, continuous_actions=False))


class AlwaysSameHeuristic(Policy):
    """Rock-paper-scissors opponent that never learns: it plays one move, drawn when the policy
    is created (each env runner draws its own), whatever it observes. RLlib's heuristic draws
    a move per episode; a policy here sees no episode boundaries, so it keeps one."""

    def __init__(
        self, observation_space: Any, action_space: Any, config: Any, seed: int | None = None
    ) -> None:
        super().__init__(observation_space, action_space, config, seed)
        self.move = int(np.random.default_rng(seed).integers(action_space.n))

    def compute_actions(self, obs_batch: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, list, dict]:  # noqa: ARG002
        return np.full(len(obs_batch), self.move, dtype=np.int64), [], {}


__all__ = [
    "AlwaysSameHeuristic",
    "MultiAgentCartPole",
    "MultiAgentPendulum",
    "learner_vs_opponent",
    "policy_per_agent",
    "RockPaperScissors",
    "SimpleSpread",
    "shared_policy",
]
