"""``.multi_agent()``: several policies, which agent acts with which, which learn; and what a
multi-agent config must hold together (``check_multi_agent``)."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import PrivateAttr, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

KEYS = (
    "policies",
    "policy_mapping_fn",
    "policies_to_train",
    "count_steps_by",
    "policy_states_are_swappable",
    "observation_fn",
)


class MultiAgentSettings(ConfigSection):
    """``multi_agent()``'s settings."""

    policies: Any = None
    """``None``: one policy (``"default_policy"``, for every agent of a multi-agent env); a set of
    policy ids (spaces inferred from the agents mapped to each) or ``{id: PolicySpec(...)}``."""
    policy_mapping_fn: Any = None
    """``fn(agent_id, episode, worker, **kwargs) -> policy id``, asked once per agent and
    episode; a function or ``"package.module:function"``. Needed with more than one policy."""
    policies_to_train: Any = None
    """The policies that learn: ``None`` (all), a list of ids, or ``fn(policy_id, batch) -> bool``;
    the others act with fixed weights (opponents, snapshots)."""
    count_steps_by: Literal["env_steps", "agent_steps"] = "env_steps"
    """What ``train_batch_size`` and ``rollout_fragment_length`` count in a multi-agent env: env
    steps, or agent steps (each agent's action is one)."""
    policy_states_are_swappable: bool = False
    """RLlib's hint for swapping policies in and out of a capped policy map; rltrainer keeps every
    policy in memory, so it changes nothing (accepted for compatibility)."""
    observation_fn: Any = None
    """``fn(agent_obs, worker, base_env, policies, episode) -> agent_obs``: rewrite each env's
    observation dict before the policies see it (e.g. add other agents' observations)."""

    # Whether the env is a MultiAgentEnv (created once to find out; None: not asked yet).
    _env_is_multi_agent: bool | None = PrivateAttr(default=None)

    def multi_agent(self, **kwargs: Any) -> Self:
        """Several policies: which exist, which agent acts with which, which learn (README,
        "Multi-agent training")."""
        return self._update("multi_agent", kwargs)

    @property
    def is_multi_agent(self) -> bool:
        """Whether this config trains in a multi-agent env: ``multi_agent(policies=...)`` or
        ``policy_mapping_fn`` was set, or the env is a ``MultiAgentEnv`` (or a PettingZoo env)."""
        if self.policies is not None or self.policy_mapping_fn is not None:
            return True
        if self._env_is_multi_agent is None:
            from rltrainer.env.registry import env_is_multi_agent

            self._env_is_multi_agent = env_is_multi_agent(self.env)
        return self._env_is_multi_agent

    def get_multi_agent_setup(self) -> dict[str, Any]:
        """``{policy id: PolicySpec}`` of a multi-agent config (``{"default_policy": ...}`` when
        no ``policies`` were given)."""
        from rltrainer.policy_spec import DEFAULT_POLICY_ID, PolicySpec

        return dict(self.policies) if self.policies is not None else {DEFAULT_POLICY_ID: PolicySpec()}

    def policy_config(self, policy_id: str) -> Self:
        """This config with policy ``policy_id``'s own settings (its ``PolicySpec.config``) applied."""
        spec = self.get_multi_agent_setup().get(policy_id)
        if spec is None or not spec.config:
            return self
        overrides = dict(spec.config)
        if isinstance(overrides.get("model"), dict):
            overrides["model"] = {**self.model.model_dump(), **overrides["model"]}
        clone = self.copy()
        try:
            clone.update_from_dict(overrides)
        except ConfigError as err:
            raise ConfigError(
                f"policy {policy_id!r}'s config: {str(err).removeprefix('config(): ')}"
            ) from None
        return clone

    def _check_multi_agent_settings(self) -> None:
        if self.policies is not None or self.policy_mapping_fn is not None:
            check_multi_agent(self, imports=False)  # (a MultiAgentEnv alone: checked at build())

    @field_validator("policies", mode="before")
    @classmethod
    def _policies(cls, value: Any) -> Any:
        from rltrainer.policy_spec import parse_policies

        return parse_policies(value)

    @field_validator("policies_to_train", mode="before")
    @classmethod
    def _policies_to_train(cls, value: Any) -> Any:
        from rltrainer.policy_spec import parse_policies_to_train

        return parse_policies_to_train(value)

    @field_validator("policy_mapping_fn")
    @classmethod
    def _policy_mapping_fn(cls, fn: Any) -> Any:
        from rltrainer.policy_spec import check_callable_setting

        return check_callable_setting(fn, "(agent_id, episode, worker, **kwargs) -> policy id")

    @field_validator("observation_fn")
    @classmethod
    def _observation_fn(cls, fn: Any) -> Any:
        from rltrainer.policy_spec import check_callable_setting

        return check_callable_setting(fn, "(agent_obs, worker, base_env, policies, episode) -> agent_obs")


def check_multi_agent(config: Any, imports: bool = True) -> None:
    """What a multi-agent ``AlgorithmConfig`` must hold together (spaces and the mapping are
    checked when the env runners are built, against the env's agents). ``imports=False``
    (``validate()``, which the operator runs) imports no user code: the mapping and
    ``observation_fn`` are imported by the driver, at ``build()``."""
    from rltrainer.policy_spec import mapping_function

    name = config.ALGORITHM or type(config).__name__
    if not config.SUPPORTS_MULTI_AGENT:
        raise ConfigError(
            f"{name} trains one policy on single-agent envs; multi-agent configs (policies, "
            "policy_mapping_fn, or a MultiAgentEnv) train with PPO, DQN, SAC, DDPG or TD3"
        )
    policies = config.get_multi_agent_setup()
    if isinstance(config.policies_to_train, list):
        unknown = [pid for pid in config.policies_to_train if pid not in policies]
        if unknown:
            raise ConfigError(
                f"multi_agent(): policies_to_train names unknown policy {unknown[0]!r}; "
                f"policies: {', '.join(policies)}"
            )
    if imports:
        from rltrainer.utils.import_paths import resolve_function

        mapping_function(config)  # ConfigError: several policies without a mapping, or a bad name
        resolve_function("observation_fn", config.observation_fn)
    elif config.policy_mapping_fn is None and len(policies) > 1:
        mapping_function(config)  # its ConfigError: several policies need a mapping
    use_lstm = config.model.use_lstm
    for pid, spec in policies.items():
        if spec.config:
            unknown = config._unknown_keys(spec.config)
            if unknown:
                raise ConfigError(
                    f"policy {pid!r}'s config has unknown key(s) {unknown}; allowed: any setting of "
                    f"{type(config).__name__} (e.g. lr, gamma, model)"
                )
            use_lstm = use_lstm or config.policy_config(pid).model.use_lstm
    if use_lstm:
        raise ConfigError(
            "model.use_lstm: recurrent policies train on single-agent envs only; multi-agent "
            "policies are feed-forward (set use_lstm=False)"
        )
    if config.is_offline:
        raise ConfigError(
            "offline_data(input_=...) feeds single-agent training; multi-agent configs sample their envs"
        )
    if config.compress_observations:
        raise ConfigError(
            "compress_observations compresses single-agent rollouts; multi-agent runners send theirs as "
            "they are: remove it"
        )
    if config.env_task_fn is not None:
        raise ConfigError(
            "env_task_fn sets tasks on single-agent TaskSettableEnvs; a multi-agent config cannot use it"
        )
    if config.remote_worker_envs:
        raise ConfigError(
            "remote_worker_envs puts single-agent envs in actors of their own; multi-agent runners step "
            "their envs in their own process: remove it (or add env runners for slow envs)"
        )
