"""``PolicySpec`` and the ``multi_agent()`` settings' checks and JSON form (no torch imported).

A multi-agent config names its policies (``policies``), which agent acts with which
(``policy_mapping_fn``) and which of them learn (``policies_to_train``). Configs are saved in
every checkpoint as JSON, so classes and functions are written as ``"package.module:name"``
paths and spaces with ``space_to_json``; nothing is pickled.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from gymnasium import spaces

from rltrainer.errors import ConfigError
from rltrainer.utils.import_paths import object_path, resolve_function

DEFAULT_POLICY_ID = "default_policy"
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]+")


@dataclasses.dataclass
class PolicySpec:
    """One policy of a multi-agent config (RLlib's ``PolicySpec``).

    ``policy_class``: the ``Policy`` subclass it acts with (``None``: the algorithm's; a class
    or ``"package.module:Class"``); ``observation_space``/``action_space``: ``None`` infers
    them from the agents mapped to it; ``config``: settings of this policy that differ from the
    algorithm's (e.g. ``{"lr": 1e-4}`` or ``{"model": {"fcnet_hiddens": [32]}}``).
    """

    policy_class: Any = None
    observation_space: spaces.Space | None = None
    action_space: spaces.Space | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        from rltrainer.env.spaces import space_to_json

        cls = self.policy_class
        return {
            "policy_class": object_path(cls) if isinstance(cls, type) else cls,
            "observation_space": None
            if self.observation_space is None
            else space_to_json(self.observation_space),
            "action_space": None if self.action_space is None else space_to_json(self.action_space),
            "config": dict(self.config),
        }


def parse_policies(value: Any) -> dict[str, PolicySpec] | None:
    """``policies`` as ``{policy id: PolicySpec}`` from RLlib's forms: a set or list of ids, or
    a dict of ids to ``PolicySpec``, ``None``, a ``(class, obs space, action space, config)``
    tuple, or ``to_dict()``'s JSON form. ``ValueError`` saying what is allowed."""
    if value is None:
        return None
    if isinstance(value, set | frozenset):
        value = dict.fromkeys(sorted(value, key=str))
    elif isinstance(value, list | tuple):
        value = dict.fromkeys(value)
    if not isinstance(value, dict) or not value:
        raise ValueError(
            "policies must be a non-empty set of policy ids or a dict {policy id: PolicySpec(...)}"
        )
    parsed = {}
    for pid, spec in value.items():
        if not isinstance(pid, str) or not pid:
            raise ValueError(f"policy ids are non-empty strings, got {pid!r}")
        if not _PLAIN_ID.fullmatch(pid):
            raise ValueError(
                f"policy id {pid!r}: use letters, digits, '_', '.' and '-' "
                "(ids name checkpoint files and result keys)"
            )
        parsed[pid] = _spec(pid, spec)
    return parsed


def _spec(pid: str, spec: Any) -> PolicySpec:
    if spec is None:
        return PolicySpec()
    if isinstance(spec, PolicySpec):
        return spec
    if isinstance(spec, tuple | list) and len(spec) == 4:
        return PolicySpec(*spec[:3], config=dict(spec[3] or {}))
    if isinstance(spec, dict) and set(spec) <= {f.name for f in dataclasses.fields(PolicySpec)}:
        from rltrainer.env.spaces import space_from_json

        parts = dict(spec)
        for key in ("observation_space", "action_space"):
            if isinstance(parts.get(key), dict):
                parts[key] = space_from_json(parts[key])
        parts["config"] = dict(parts.get("config") or {})
        return PolicySpec(**parts)
    raise ValueError(
        f"policy {pid!r}: a policy is given as PolicySpec(policy_class, observation_space, action_space, "
        f"config), None, or a 4-tuple of those; got {type(spec).__name__}"
    )


def policies_to_json(policies: dict[str, PolicySpec] | None) -> dict[str, Any] | None:
    return None if policies is None else {pid: spec.to_json() for pid, spec in policies.items()}


def check_callable_setting(value: Any, signature: str) -> Any:
    """A function or ``"package.module:function"`` (imported when the algorithm is built)."""
    if value is None or callable(value) or (isinstance(value, str) and ":" in value.strip(":")):
        return value
    raise ValueError(f'must be a function {signature}, or "package.module:function"')


def parse_policies_to_train(value: Any) -> Any:
    """``None`` (all), a collection of ids, or a function ``(policy_id, batch) -> bool``."""
    if value is None or callable(value) or (isinstance(value, str) and ":" in value):
        return value
    if isinstance(value, str):
        return [value]
    if isinstance(value, set | frozenset | list | tuple) and all(isinstance(p, str) for p in value):
        return sorted(value)
    raise ValueError(
        'must be a list of policy ids, a function (policy_id, batch) -> bool, or "package.module:function"'
    )


def default_mapping_fn(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:  # noqa: ARG001
    """Every agent acts with ``"default_policy"`` (a multi-agent env with no ``multi_agent()``)."""
    return DEFAULT_POLICY_ID


def mapping_function(config: Any) -> Callable[..., Any]:
    fn = resolve_function("policy_mapping_fn", config.policy_mapping_fn)
    if fn is not None:
        return fn
    policies = config.policies or {DEFAULT_POLICY_ID: None}
    if len(policies) == 1:
        only = next(iter(policies))
        return lambda agent_id, episode=None, worker=None, **kwargs: only  # noqa: ARG005
    raise ConfigError(
        f"multi_agent(): {len(policies)} policies ({', '.join(policies)}) need a policy_mapping_fn "
        "(agent_id, episode, worker, **kwargs) -> policy id saying which agent acts with which"
    )


def trainable_policies(config: Any, policy_ids: list[str]) -> list[str]:
    """The ids of ``policy_ids`` that learn (``policies_to_train``; a function is asked with
    ``batch=None``, as RLlib does when it builds the learners)."""
    chosen = config.policies_to_train
    if chosen is None:
        return list(policy_ids)
    if isinstance(chosen, list):
        return [pid for pid in policy_ids if pid in chosen]
    fn = resolve_function("policies_to_train", chosen)
    return [pid for pid in policy_ids if fn(pid, None)]


__all__ = ["DEFAULT_POLICY_ID", "PolicySpec", "parse_policies", "policies_to_json"]
