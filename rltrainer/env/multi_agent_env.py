"""Multi-agent envs: RLlib's ``MultiAgentEnv`` contract (defined in
``rltrainer.env.multi_agent_contract``, re-exported here), ``make_multi_agent``, and the check
that a multi-agent env keeps the contract (``check_multi_agent_env``).

PettingZoo envs are adapted by ``rltrainer.env.wrappers.pettingzoo_env``; ``to_multi_agent_env``
picks the wrapper. PettingZoo itself stays optional (``pip install 'rltrainer[multiagent]'``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from rltrainer.env.env_checker import SKIP, _allowed_action, _misfit
from rltrainer.env.env_context import EnvContext
from rltrainer.env.multi_agent_contract import (
    ALL,
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    _pettingzoo_kind,
    check_action_dict,
    episode_end_flags,
    is_multi_agent_env,
    require_action_dict,
)
from rltrainer.env.registry import make_env
from rltrainer.env.spaces import space_parts
from rltrainer.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from rltrainer.errors import EnvError

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


# --- wrapping --------------------------------------------------------------------------------


def to_multi_agent_env(obj: Any) -> MultiAgentEnv:
    """``obj`` as a ``MultiAgentEnv``: itself when it is one, PettingZoo envs wrapped
    (``PettingZooEnv`` for turn-based AEC envs, ``ParallelPettingZooEnv`` for parallel ones);
    ``EnvError`` for anything else."""
    if isinstance(obj, MultiAgentEnv):
        return obj
    kind = _pettingzoo_kind(obj)
    if kind is not None:
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
    "AgentID",
    "MultiAgentDict",
    "MultiAgentEnv",
    "check_action_dict",
    "check_multi_agent_env",
    "episode_end_flags",
    "is_multi_agent_env",
    "make_multi_agent",
    "require_action_dict",
    "to_multi_agent_env",
]
