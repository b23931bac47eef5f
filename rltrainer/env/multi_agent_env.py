"""Multi-agent envs: RLlib's ``MultiAgentEnv`` contract, ``make_multi_agent``, and the check
that a multi-agent env keeps the contract (``check_multi_agent_env``).

PettingZoo envs are adapted by ``rltrainer.env.wrappers.pettingzoo_env``; ``to_multi_agent_env``
picks the wrapper. PettingZoo itself stays optional (``pip install 'rltrainer[multiagent]'``).
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from rltrainer.env.env_checker import SKIP, _allowed_action, _misfit
from rltrainer.env.env_context import EnvContext
from rltrainer.env.spaces import space_parts
from rltrainer.errors import EnvError

ALL = "__all__"
"""The key of ``terminateds`` / ``truncateds`` that ends the whole episode."""

AgentID = Any
MultiAgentDict = dict[AgentID, Any]

#: Spaces the models and samplers handle, for observations and actions (Dict and Tuple nest).
SUPPORTED_OBS_SPACES = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
    gym.spaces.Dict,
    gym.spaces.Tuple,
)
SUPPORTED_ACTION_SPACES = SUPPORTED_OBS_SPACES


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


# --- make_multi_agent ------------------------------------------------------------------------


def make_multi_agent(env_name_or_creator: str | Callable[[dict], gym.Env]) -> type[MultiAgentEnv]:
    """A ``MultiAgentEnv`` class of N independent copies of a single-agent env.

    ``env_name_or_creator`` is an env name (a gymnasium id, a ``register_env`` name, ...) or a
    callable ``creator(config) -> gym.Env``. The class takes a config dict
    ``{"num_agents": N, ...}``; the rest of the config goes to each copy (as ``gym.make``'s
    keyword arguments for an id). Agents are ``0 .. N-1``; an agent is done when its copy's
    episode ends and the episode ends when every agent is done. ``reset(seed=s)`` seeds copy
    ``i`` with ``s + i``.
    """
    if not (isinstance(env_name_or_creator, str) or callable(env_name_or_creator)):
        raise EnvError(
            f"make_multi_agent needs an env name or a creator callable, got {env_name_or_creator!r}"
        )

    class MultiEnv(_IndependentCopies):
        def __init__(self, config: dict | None = None) -> None:
            super().__init__(env_name_or_creator, config)

    label = (
        env_name_or_creator if isinstance(env_name_or_creator, str) else _callable_name(env_name_or_creator)
    )
    MultiEnv.__name__ = MultiEnv.__qualname__ = f"MultiAgent[{label}]"
    return MultiEnv


class _IndependentCopies(MultiAgentEnv):
    """N copies of one single-agent env, one per agent (``make_multi_agent``'s classes)."""

    def __init__(self, spec: str | Callable[[dict], gym.Env], config: dict | None) -> None:
        config = EnvContext({}) if config is None else config
        num_agents = config.get("num_agents", 1)
        if isinstance(num_agents, bool) or not isinstance(num_agents, numbers.Integral) or num_agents < 1:
            raise EnvError(f"make_multi_agent: num_agents must be an int >= 1, got {num_agents!r}")
        rest = {key: value for key, value in config.items() if key != "num_agents"}
        # Copies get an EnvContext (what registered creators expect) that keeps the runner's
        # worker/vector indices when the config is one.
        ctx = (
            config.copy_with_overrides(env_config=rest)
            if isinstance(config, EnvContext)
            else EnvContext(rest)
        )
        self.envs = [_make_copy(spec, ctx) for _ in range(int(num_agents))]
        self.possible_agents = list(range(len(self.envs)))
        self.agents = []
        self.observation_spaces = {i: env.observation_space for i, env in enumerate(self.envs)}
        self.action_spaces = {i: env.action_space for i, env in enumerate(self.envs)}
        self._all_terminated = True  # whether every agent done so far ended by termination

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        obs, infos = {}, {}
        for i, env in enumerate(self.envs):
            obs[i], infos[i] = env.reset(seed=None if seed is None else seed + i, options=options)
        self.agents = list(self.possible_agents)
        self._all_terminated = True
        return obs, infos

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        check_action_dict(self, action_dict, self.agents)
        obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        for i in self.agents:
            obs[i], rewards[i], terminated, truncated, infos[i] = self.envs[i].step(action_dict[i])
            terminateds[i], truncateds[i] = bool(terminated), bool(truncated)
            if terminated or truncated:
                self._all_terminated = self._all_terminated and bool(terminated)
        self.agents = [i for i in self.agents if not (terminateds[i] or truncateds[i])]
        terminateds[ALL], truncateds[ALL] = episode_end_flags(not self.agents, self._all_terminated)
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _make_copy(spec: str | Callable[[dict], gym.Env], ctx: EnvContext) -> gym.Env:
    if isinstance(spec, str):
        from rltrainer.env.registry import make_env  # registry imports much; only names need it

        return make_env(spec, ctx)
    created = spec(ctx)
    if not isinstance(created, gym.Env):
        raise EnvError(
            f"make_multi_agent: the creator {_callable_name(spec)} returned {type(created).__name__}, "
            "not a gymnasium.Env"
        )
    return created


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


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


# --- recognizing and wrapping ----------------------------------------------------------------


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


def to_multi_agent_env(obj: Any) -> MultiAgentEnv:
    """``obj`` as a ``MultiAgentEnv``: itself when it is one, PettingZoo envs wrapped
    (``PettingZooEnv`` for turn-based AEC envs, ``ParallelPettingZooEnv`` for parallel ones);
    ``EnvError`` for anything else."""
    if isinstance(obj, MultiAgentEnv):
        return obj
    kind = _pettingzoo_kind(obj)
    if kind is not None:
        from rltrainer.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv

        return PettingZooEnv(obj) if kind == "aec" else ParallelPettingZooEnv(obj)
    raise EnvError(
        f"{type(obj).__name__} is not a multi-agent env: expected a rltrainer MultiAgentEnv or a "
        "PettingZoo AECEnv / ParallelEnv (single-agent gymnasium envs: make_multi_agent(...))"
    )


# --- the check -------------------------------------------------------------------------------


def check_multi_agent_env(env: MultiAgentEnv, name: str, seed: int = 0) -> None:
    """One seeded ``reset`` and one ``step`` of ``env`` with random (allowed) actions for the
    agents asked to act, checked against the ``MultiAgentEnv`` contract and the agents' spaces;
    ``EnvError`` naming the agent, the call and what is wrong."""

    def fail(problem: str) -> None:
        raise EnvError(f"multi-agent env {name!r} failed the env check: {problem}; {SKIP}")

    known = list(env.possible_agents)
    if not known:
        fail(f"{type(env).__name__}.possible_agents is empty: list every agent id that may appear")
    for agent in known:
        _check_spaces(env, agent, fail)
    out = _call(lambda: env.reset(seed=seed), f"reset(seed={seed})", fail)
    if not (isinstance(out, tuple) and len(out) == 2):
        fail(f"reset() must return (observations dict, infos dict), got {_kind(out)}")
    obs, infos = out
    _check_dicts("reset()", {"observations": obs, "infos": infos}, known, fail)
    if not obs:
        fail("reset() returned an empty observations dict: no agent would act")
    _check_observations(env, obs, "reset()", fail)
    actions = {agent: _allowed_action(env.get_action_space(agent), obs[agent], None, seed) for agent in obs}
    out = _call(lambda: env.step(actions), f"step({actions!r:.200})", fail)
    if not (isinstance(out, tuple) and len(out) == 5):
        results = "(observations, rewards, terminateds, truncateds, infos) dicts"
        fail(f"step() must return {results}, got {_kind(out)}")
    obs, rewards, terminateds, truncateds, infos = out
    dicts = {"observations": obs, "rewards": rewards, "terminateds": terminateds, "truncateds": truncateds}
    _check_dicts("step()", {**dicts, "infos": infos}, known, fail)
    for flags in ("terminateds", "truncateds"):
        if ALL not in dicts[flags]:
            fail(f"step()'s {flags} dict has no {ALL!r} key (True ends the episode)")
    _check_observations(env, obs, "step()", fail)
    for agent, reward in rewards.items():
        if not _is_number(reward):
            kind = type(reward).__name__
            fail(f"step()'s reward for agent {agent!r} must be a number, got {kind} {reward!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) or (isinstance(value, np.ndarray) and value.shape == ())


def _call(fn: Callable[[], Any], what: str, fail: Callable[[str], None]) -> Any:
    try:
        return fn()
    except EnvError:
        raise
    except Exception as err:  # noqa: BLE001 - any error of user env code, reported in one line
        fail(f"{what} raised {type(err).__name__}: {err}")


def _check_spaces(env: MultiAgentEnv, agent: AgentID, fail: Callable[[str], None]) -> None:
    for kind, supported in (("observation", SUPPORTED_OBS_SPACES), ("action", SUPPORTED_ACTION_SPACES)):
        try:
            space = env.get_observation_space(agent) if kind == "observation" else env.get_action_space(agent)
        except EnvError as err:
            fail(str(err))
        if not isinstance(space, gym.Space):
            fail(f"agent {agent!r}'s {kind} space is a {type(space).__name__}, not a gymnasium space")
        for path, part in space_parts(space):
            if not isinstance(part, supported):
                where = f" (part {path!r} of {space})" if path else ""
                fail(
                    f"agent {agent!r}'s {kind} space {part}{where} is not supported; {kind} spaces may be "
                    f"{', '.join(cls.__name__ for cls in supported)} (Dict and Tuple nested)"
                )


def _check_dicts(call: str, dicts: dict[str, Any], known: list[AgentID], fail: Callable[[str], None]) -> None:
    """Each result is a dict keyed by agents of ``possible_agents`` (and ``"__all__"`` in the flags)."""
    for what, value in dicts.items():
        if not isinstance(value, dict):
            fail(f"{call}'s {what} must be a dict agent id -> value, got {_kind(value)}")
        for agent in value:
            if agent == ALL and what in ("terminateds", "truncateds"):
                continue
            if agent not in known:
                fail(f"{call}'s {what} name agent {agent!r}, which is not in possible_agents {known}")


def _check_observations(env: MultiAgentEnv, obs: dict, call: str, fail: Callable[[str], None]) -> None:
    for agent, agent_obs in obs.items():
        space = env.get_observation_space(agent)
        # The single-agent check's reading of "fits" (float64 for a float32 Box is cast; a Box's
        # bounds are only logged): the runners are as lax.
        problem = _misfit(space, agent_obs)
        if problem is not None:
            fail(f"{call}'s observation of agent {agent!r} {problem} (observation space {space})")


def _kind(value: Any) -> str:
    return f"a tuple of {len(value)}" if isinstance(value, tuple) else f"a {type(value).__name__}"


__all__ = [
    "ALL",
    "MultiAgentEnv",
    "check_action_dict",
    "check_multi_agent_env",
    "episode_end_flags",
    "is_multi_agent_env",
    "make_multi_agent",
    "require_action_dict",
    "to_multi_agent_env",
]
