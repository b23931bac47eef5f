"""RLlib's ``MultiAgentEnv`` contract: the base class, the checks of an action dict, the end
flags of an episode, and ``is_multi_agent_env``, which tells a multi-agent env (ours or a
PettingZoo one) without importing PettingZoo.

The env registry, the PettingZoo wrappers and the env runners build on this module; what builds on
them (``make_multi_agent``, ``to_multi_agent_env``, ``check_multi_agent_env``) is in
``rltrainer.env.multi_agent_env``, the module users import.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym

from rltrainer.errors import EnvError

ALL = "__all__"
"""The key of ``terminateds`` / ``truncateds`` that ends the whole episode."""

AgentID = Any
MultiAgentDict = dict[AgentID, Any]


class MultiAgentEnv(gym.Env):
    """An env with several agents (RLlib's ``MultiAgentEnv``): every argument and result of
    ``reset`` and ``step`` is a dict keyed by agent id.

    Attributes (set them in ``__init__``):

    - ``possible_agents``: every agent id that may ever appear in an episode.
    - ``agents``: the ids alive now (not yet terminated or truncated).
    - ``observation_spaces`` / ``action_spaces``: agent id -> its space. Without them, a
      single ``observation_space`` / ``action_space`` is every agent's (or, when it is a Dict
      space with a part for every possible agent, each agent's part: RLlib's older form).

    Semantics of ``reset`` and ``step``:

    - The observation dict holds exactly the agents that must act next; ``step`` gets an
      action for each of them (and only them).
    - The reward dict may name any agent, acting or not; an agent's rewards add up until its
      next observation (turn-based games pay an agent after the others moved).
    - An agent whose ``terminateds[agent]`` or ``truncateds[agent]`` is True is done: it does not
      act again in this episode. Its final observation is in that step's observation dict when
      the env has one.
    - ``terminateds["__all__"]`` or ``truncateds["__all__"]`` True ends the episode (both dicts
      always carry the key); the next call is ``reset``.
    """

    # Class-level defaults so that subclasses need not call ``super().__init__()`` (RLlib's
    # examples often don't); tuples, so that no instance mutates a shared list.
    possible_agents: list[AgentID] = ()  # type: ignore[assignment]
    agents: list[AgentID] = ()  # type: ignore[assignment]
    observation_spaces: dict[AgentID, gym.Space] | None = None
    action_spaces: dict[AgentID, gym.Space] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        """Start an episode: ``(observations, infos)`` of the agents that act first."""
        raise NotImplementedError

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        """Apply ``action_dict`` (one action per agent of the last observation dict):
        ``(observations, rewards, terminateds, truncateds, infos)``."""
        raise NotImplementedError

    @property
    def num_agents(self) -> int:
        """How many agents are alive now (``len(agents)``)."""
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        """How many agents may ever appear (``len(possible_agents)``)."""
        return len(self.possible_agents)

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        """``agent_id``'s observation space; ``EnvError`` naming the known agents when it has none."""
        return self._space_of(agent_id, "observation")

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        """``agent_id``'s action space; ``EnvError`` naming the known agents when it has none."""
        return self._space_of(agent_id, "action")

    def _space_of(self, agent_id: AgentID, kind: str) -> gym.Space:
        per_agent = getattr(self, f"{kind}_spaces", None)
        if per_agent is not None:
            if agent_id in per_agent:
                return per_agent[agent_id]
            raise EnvError(
                f"{type(self).__name__} has no {kind} space for agent {agent_id!r}: "
                f"{kind}_spaces has agents {list(per_agent)}"
            )
        single = getattr(self, f"{kind}_space", None)
        if _keyed_by_agent(single, self.possible_agents):
            return single[agent_id]  # RLlib's older form: a Dict space of the agents' spaces
        if isinstance(single, gym.Space):
            return single  # one space shared by every agent
        raise EnvError(
            f"{type(self).__name__} has no {kind} space for agent {agent_id!r}: set {kind}_spaces "
            f"(agent id -> space) or a single {kind}_space; known agents: {list(self.possible_agents)}"
        )


def _keyed_by_agent(space: Any, agents: list[AgentID]) -> bool:
    """Whether ``space`` is a Dict space with a part for every agent (not one Dict observation
    that all agents share: that one's keys are not the agent ids)."""
    return isinstance(space, gym.spaces.Dict) and bool(agents) and all(a in space.spaces for a in agents)


def require_action_dict(env: MultiAgentEnv, action_dict: Any) -> None:
    """``EnvError`` unless ``action_dict`` is a dict (agent id -> action)."""
    if not isinstance(action_dict, dict):
        kind = type(action_dict).__name__
        raise EnvError(f"{type(env).__name__}.step() takes a dict agent id -> action, got a {kind}")


def check_action_dict(env: MultiAgentEnv, action_dict: Any, expected: list[AgentID]) -> None:
    """``EnvError`` unless ``action_dict`` is a dict with an action for exactly ``expected``."""
    require_action_dict(env, action_dict)
    if not expected:
        raise EnvError(f"{type(env).__name__}.step() was called after the episode ended; call reset() first")
    extra = [agent for agent in action_dict if agent not in expected]
    missing = [agent for agent in expected if agent not in action_dict]
    if extra or missing:
        raise EnvError(
            f"{type(env).__name__}.step() needs an action for exactly the agents to act {expected}; "
            f"got actions for {list(action_dict)}"
            + (f" (not acting now: {extra})" if extra else "")
            + (f" (missing: {missing})" if missing else "")
        )


def episode_end_flags(all_done: bool, all_terminated: bool) -> tuple[bool, bool]:
    """``(terminateds["__all__"], truncateds["__all__"])``: the episode is over when every agent is
    done; it ended by termination when every agent did, else by truncation (so exactly one flag
    is True at the end, and a runner bootstraps truncated episodes)."""
    if not all_done:
        return False, False
    return (True, False) if all_terminated else (False, True)


def _pettingzoo_kind(obj: Any) -> str | None:
    """``"aec"``, ``"parallel"`` or ``None`` for ``obj``. An object can only be a PettingZoo env
    when pettingzoo is imported already, so this never imports it (it stays optional and its
    import is not free)."""
    pettingzoo = sys.modules.get("pettingzoo")
    if pettingzoo is None:
        return None
    if isinstance(obj, pettingzoo.AECEnv):
        return "aec"
    if isinstance(obj, pettingzoo.ParallelEnv):
        return "parallel"
    return None


def is_multi_agent_env(obj: Any) -> bool:
    """Whether ``obj`` is a multi-agent env: a ``MultiAgentEnv`` or a PettingZoo ``AECEnv`` /
    ``ParallelEnv`` instance."""
    return isinstance(obj, MultiAgentEnv) or _pettingzoo_kind(obj) is not None
