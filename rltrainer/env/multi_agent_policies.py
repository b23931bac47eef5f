"""A ``MultiAgentEnvRunner``'s policies: their spaces inferred from the agents mapped to each,
each policy placed in the runner (``EnvRunnerCore._place_policy``) with its own observation
filter (``PolicyFilters``: one filter state for ``EnvRunnerGroup``), policies added and removed
while training (RLlib's ``add_policy``/``remove_policy``), and the policy mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rltrainer.errors import ConfigError, EnvError
from rltrainer.policy.policy import Policy, policy_class_of
from rltrainer.policy_spec import PolicySpec
from rltrainer.utils.import_paths import resolve_function


class PolicyFilters:
    """One observation filter per policy, with a filter's state interface (keys ``pid/name``),
    so ``EnvRunnerGroup`` merges and broadcasts them as it does a single filter."""

    def __init__(self, filters: dict[str, Any]) -> None:
        self.filters = filters

    def get_state(self) -> dict[str, np.ndarray]:
        return _prefixed({pid: f.get_state() for pid, f in self.filters.items()})

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        for pid, part in _unprefixed(state).items():
            if pid in self.filters:
                self.filters[pid].set_state(part)

    def pop_delta(self) -> dict[str, np.ndarray]:
        return _prefixed({pid: f.pop_delta() for pid, f in self.filters.items()})

    def apply_delta(self, delta: dict[str, np.ndarray]) -> None:
        for pid, part in _unprefixed(delta).items():
            if pid in self.filters:
                self.filters[pid].apply_delta(part)


def _prefixed(states: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {f"{pid}/{name}": value for pid, state in states.items() for name, value in state.items()}


def _unprefixed(state: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    parts: dict[str, dict[str, np.ndarray]] = {}
    for key, value in state.items():
        pid, _, name = key.rpartition("/")
        parts.setdefault(pid, {})[name] = value
    return parts


class _ProbeEpisode:
    """What ``policy_mapping_fn`` gets while the runner infers the policies' spaces."""

    def __init__(self, episode_id: int) -> None:
        self.episode_id = episode_id
        self.env_index = 0
        self.user_data: dict[str, Any] = {}


class PolicyMap:
    """``MultiAgentEnvRunner``'s policies (the runner inherits this; ``_build`` fills the map)."""

    config: Any
    worker_index: int
    num_envs: int
    envs: list[Any]
    policy_map: dict[str, Any]
    policy_specs: dict[str, PolicySpec]
    policies_to_train: list[str]
    policy_mapping_fn_setting: Any
    filter: PolicyFilters
    _mapping_fn: Any
    _episode: list[Any]
    _policy_config: dict[str, Any] | None

    def _infer_specs(self, specs: dict[str, PolicySpec]) -> dict[str, PolicySpec]:
        """Each policy's spaces: given in its spec, else those of the agents mapped to it (all
        alike, or ``ConfigError``); the mapping is asked for every possible agent with two
        probe episodes (ids 0 and 1, for mappings that alternate by episode)."""
        env = self.envs[0]
        agents = list(getattr(env, "possible_agents", None) or getattr(env, "agents", None) or [])
        seen: dict[str, list[Any]] = {}
        for episode_id in (0, 1):
            for agent in agents:
                pid = self._call_mapping(agent, _ProbeEpisode(episode_id))
                if pid not in specs:
                    raise ConfigError(
                        f"policy_mapping_fn maps agent {agent!r} to {pid!r}, which is not a policy; "
                        f"policies: {', '.join(specs)}"
                    )
                if agent not in seen.setdefault(pid, []):
                    seen[pid].append(agent)
        spaces_of = {
            agent: (env.get_observation_space(agent), env.get_action_space(agent)) for agent in agents
        }
        shared = set(map(repr, spaces_of.values()))
        filled = {}
        for pid, spec in specs.items():
            obs_space, act_space = spec.observation_space, spec.action_space
            mapped = seen.get(pid, [])
            for agent in mapped:
                agent_obs, agent_act = spaces_of[agent]
                for kind, given, found in (
                    ("observation", obs_space, agent_obs),
                    ("action", act_space, agent_act),
                ):
                    if given is not None and given != found:
                        from_spec = getattr(spec, f"{kind}_space") is not None
                        other = "its PolicySpec" if from_spec else f"agent {mapped[0]!r}"
                        raise ConfigError(
                            f"policy {pid!r}: agent {agent!r} has {kind} space {found}, but {other} "
                            f"says {given}; agents mapped to one policy need the same spaces"
                        )
                obs_space = obs_space or agent_obs
                act_space = act_space or agent_act
            if (obs_space is None or act_space is None) and len(shared) == 1 and agents:
                agent_obs, agent_act = spaces_of[agents[0]]
                obs_space, act_space = obs_space or agent_obs, act_space or agent_act
            if obs_space is None or act_space is None:
                raise ConfigError(
                    f"policy {pid!r}: no agent maps to it and the env's agents have different spaces, "
                    "so its spaces cannot be inferred; give "
                    "PolicySpec(observation_space=..., action_space=...)"
                )
            filled[pid] = PolicySpec(spec.policy_class, obs_space, act_space, dict(spec.config))
        return filled

    def _call_mapping(self, agent: Any, episode: Any) -> str:
        try:
            return self._mapping_fn(agent, episode, self)
        except TypeError:  # RLlib's older two-argument form (agent_id, episode)
            return self._mapping_fn(agent, episode)

    def _add(self, pid: str, spec: PolicySpec, weights: dict[str, Any] | None = None) -> Any:
        config = self.config.policy_config(pid)
        seed = self._seed(len(self.policy_map))
        policy_class = policy_class_of(spec, self.config.get_policy_class())
        try:
            policy = policy_class(spec.observation_space, spec.action_space, config, seed=seed)
        except ConfigError as err:
            raise ConfigError(f"policy {pid!r}: {err}") from None
        except ValueError as err:
            raise EnvError(f"policy {pid!r} ({spec.observation_space}, {spec.action_space}): {err}") from None
        self.filter.filters[pid] = self._place_policy(policy, config)
        if weights is not None:
            policy.set_weights(weights)
        self.policy_map[pid] = policy
        self.policy_specs[pid] = spec
        self._policy_config = None  # (policy_config() is read again)
        policy.custom_compute = type(policy).compute_actions is not Policy.compute_actions
        return policy

    def add_policy(
        self,
        policy_id: str,
        spec: PolicySpec,
        weights: dict[str, Any] | None = None,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
    ) -> None:
        """Add a policy (RLlib's ``RolloutWorker.add_policy``); a new mapping applies from the
        next episode of each env (agents keep their policy until their episode ends)."""
        self._add(policy_id, spec, weights)
        if policy_mapping_fn is not None:
            self._set_mapping(policy_mapping_fn)
        if policies_to_train is not None:
            self.policies_to_train = list(policies_to_train)

    def remove_policy(
        self, policy_id: str, policy_mapping_fn: Any = None, policies_to_train: Any = None
    ) -> None:
        self._policy_config = None
        self.policy_map.pop(policy_id, None)
        self.policy_specs.pop(policy_id, None)
        self.filter.filters.pop(policy_id, None)
        if policy_mapping_fn is not None:
            self._set_mapping(policy_mapping_fn)
        if policies_to_train is not None:
            self.policies_to_train = list(policies_to_train)
        else:
            self.policies_to_train = [pid for pid in self.policies_to_train if pid != policy_id]
        self._episode = [None] * self.num_envs  # episodes restart: no agent keeps acting with it

    def _set_mapping(self, policy_mapping_fn: Any) -> None:
        self._mapping_fn = resolve_function("policy_mapping_fn", policy_mapping_fn)
        self.policy_mapping_fn_setting = policy_mapping_fn

    def set_policy_mapping_fn(self, policy_mapping_fn: Any) -> None:
        self._set_mapping(policy_mapping_fn)

    def set_policies_to_train(self, policies_to_train: list[str]) -> None:
        self.policies_to_train = list(policies_to_train)

    def get_policy(self, policy_id: str = "default_policy") -> Any:
        """The policy ``policy_id`` (``KeyError`` naming the known ids)."""
        try:
            return self.policy_map[policy_id]
        except KeyError:
            raise KeyError(f"no policy {policy_id!r}; policies: {', '.join(self.policy_map)}") from None

    def foreach_policy_to_train(self, fn: Callable[..., Any]) -> list[Any]:
        return [fn(self.policy_map[pid], pid) for pid in self.policies_to_train if pid in self.policy_map]

    @property
    def filters(self) -> dict[str, Any]:
        return dict(self.filter.filters)

    @property
    def policy(self) -> Any:
        """The only policy (``ValueError`` with several: use ``get_policy(policy_id)``)."""
        if len(self.policy_map) == 1:
            return next(iter(self.policy_map.values()))
        raise ValueError(f"this env runner has {len(self.policy_map)} policies: use get_policy(policy_id)")

    def _mapping_fn_with_worker(self, agent: Any, episode: Any, worker: Any) -> str:  # noqa: ARG002
        pid = self._call_mapping(agent, episode)
        if pid not in self.policy_map:
            raise ConfigError(
                f"policy_mapping_fn maps agent {agent!r} to {pid!r}, which is not a policy; "
                f"policies: {', '.join(self.policy_map)}"
            )
        return pid
