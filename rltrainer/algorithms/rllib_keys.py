"""RLlib's keys inside dicts and its switches without effect, translated before a config sets them.

RLlib's tuned examples write some settings inside a dict (``replay_buffer_config:
{learning_starts: ...}``, Ape-X's ``optimizer: {num_replay_buffer_shards: ...}``, 1.x's
``multiagent: {...}``), some flat that are a dict's key here (``buffer_size``,
``prioritized_replay_alpha``), and some switches that change nothing in rltrainer
(``enable_connectors``). ``translate_rllib_keys`` rewrites a batch of settings with the tables
of ``rltrainer.algorithms.aliases`` (``PATH_ALIASES``, ``PATH_VALUES``, ``SCHEDULES``,
``NO_EFFECT``) into the config's own fields, before the config validates and sets them. Flat
renames (``ALIASES``) and one-value settings (``DOCUMENTED_SETTINGS``) are the config's own step.
"""

from __future__ import annotations

import logging
from typing import Any

from rltrainer.algorithms.aliases import DOCUMENTED_SETTINGS, NO_EFFECT, PATH_ALIASES, PATH_VALUES, SCHEDULES
from rltrainer.errors import ConfigError

logger = logging.getLogger(__name__)

#: Dicts of RLlib's whose keys the tables name (``optimizer``, ``replay_buffer_config``, ...).
PARENTS = frozenset(path.split(".", 1)[0] for path in (*PATH_ALIASES, *NO_EFFECT) if "." in path)

#: RLlib 2.x's ``input`` value for "the files of ``input_config``'s paths".
DATASET_INPUT = "dataset"

#: The constant beta of prioritized replay must be what RLlib's annealing ends at.
FINAL_BETA = "final_prioritized_replay_beta"


def translate_rllib_keys(config: Any, section: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with RLlib's nested keys, flat dict keys and no-effect switches translated
    into ``config``'s fields (see the module doc); a key whose target ``config`` lacks stays as
    given, so the config reports it as unknown under the user's name."""
    fields = type(config).model_fields
    given: dict[str, Any] = {}
    moved: dict[str, Any] = {}  # from PATH_ALIASES: keys of dicts; given settings win over flat ones
    late: dict[str, Any] = {}  # schedules: they replace the constant given beside them
    for key, value in settings.items():
        if key in NO_EFFECT:
            _say_no_effect(key)
        elif key in PATH_ALIASES and _sets(PATH_ALIASES[key], fields):
            if key in SCHEDULES:
                if value is not None:
                    late[PATH_ALIASES[key]] = value
                continue
            _put(moved, PATH_ALIASES[key], _translated_value(section, key, value))
        elif key in PARENTS and isinstance(value, dict) and _reads_from(key, fields):
            rest = _unpack(section, key, value, moved, fields)
            if key in fields:
                given[key] = rest
        else:
            given[key] = value
    _read_dataset_paths(section, given, moved)
    translated = {**{k: v for k, v in moved.items() if k not in given}, **given}
    for key, value in moved.items():  # a dict setting gains the moved keys over the current ones
        if isinstance(value, dict):
            current = getattr(config, key, None)
            also = given.get(key)
            translated[key] = {
                **(current if isinstance(current, dict) else {}),
                **(also if isinstance(also, dict) else {}),
                **value,
            }
    if FINAL_BETA in translated and "replay_buffer_config" in fields:
        _check_final_beta(config, section, translated)
    return {**translated, **late}


def is_rllib_key(key: str) -> bool:
    """Whether ``translate_rllib_keys`` reads ``key`` (a config may still lack its target)."""
    return key in PATH_ALIASES or key in NO_EFFECT or key in PARENTS or key == FINAL_BETA


def _sets(path: str, fields: Any) -> bool:
    """Whether ``path`` (a ``PATH_ALIASES`` target) is a setting of the config: a field or a key of
    one, or a setting rltrainer has one value of (checked by the config under that name)."""
    return path.split(".", 1)[0] in fields or path in DOCUMENTED_SETTINGS


def _reads_from(parent: str, fields: Any) -> bool:
    """Whether the config has ``parent`` or a setting that one of its keys names (else the
    whole dict is the config's unknown key, e.g. PPO's ``replay_buffer_config``)."""
    tops = (path.split(".", 1)[0] for key, path in PATH_ALIASES.items() if key.startswith(f"{parent}."))
    return parent in fields or any(top in fields for top in tops)


def _unpack(section: str, parent: str, value: dict[str, Any], moved: dict[str, Any], fields: Any) -> dict:
    """Move ``parent``'s keys that the tables name; the rest (for a field of the config: the
    field's own keys) is returned."""
    rest = {}
    for key, inner in value.items():
        path = f"{parent}.{key}"
        if path in NO_EFFECT:
            _say_no_effect(path)
        elif path in PATH_ALIASES:
            _put(moved, PATH_ALIASES[path], inner)
        else:
            rest[key] = inner
    if rest and parent not in fields:
        known = sorted(p.split(".", 1)[1] for p in (*PATH_ALIASES, *NO_EFFECT) if p.startswith(f"{parent}."))
        raise ConfigError(
            f"{section}(): '{parent}' holds {sorted(rest)}, which rltrainer does not read from RLlib's "
            f"'{parent}' dict; it reads {', '.join(known)} (set other settings at the top level)"
        )
    return rest


def _read_dataset_paths(section: str, given: dict[str, Any], moved: dict[str, Any]) -> None:
    """RLlib 2.x's ``input: dataset`` stands for the files of ``input_config: {paths: ...}``."""
    key = "input" if "input" in given else "input_"
    if given.get(key) != DATASET_INPUT:
        return
    if "input_" not in moved:
        raise ConfigError(
            f"{section}(): input='dataset' reads the files input_config names: set "
            "input_config: {paths: [...], format: json | parquet} (or give the paths as input)"
        )
    del given[key]


def _put(target: dict[str, Any], path: str, value: Any) -> None:
    field, _, key = path.partition(".")
    if key:
        target.setdefault(field, {})[key] = value
    else:
        target[field] = value


def _estimators_by_name(section: str, names: Any) -> Any:
    """RLlib 1.x's ``input_evaluation: [is, wis]`` -> ``{"is": {"type": "is"}, ...}``."""
    if not isinstance(names, list | tuple) or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{section}(): input_evaluation must be a list of estimator names, got {names!r}")
    return {name: {"type": name} for name in names}


#: ``PATH_ALIASES`` whose value takes another form in the field they set.
_VALUE_FORMS = {"input_evaluation": _estimators_by_name}


def _translated_value(section: str, key: str, value: Any) -> Any:
    if key in _VALUE_FORMS:
        return _VALUE_FORMS[key](section, value)
    if key not in PATH_VALUES:
        return value
    meanings = PATH_VALUES[key]
    if not any(value == known and type(value) is type(known) for known in meanings):
        raise ConfigError(f"{section}(): {key} must be one of {list(meanings)}, got {value!r}")
    return meanings[value]


def _check_final_beta(config: Any, section: str, translated: dict[str, Any]) -> None:
    final = translated.pop(FINAL_BETA)
    replay = translated.get("replay_buffer_config", config.replay_buffer_config)
    beta = replay.get("beta", 0.4)
    if final != beta:
        raise ConfigError(
            f"{section}(): {FINAL_BETA}={final!r} cannot take effect in rltrainer (prioritized "
            f"replay's beta stays constant, at replay_buffer_config beta={beta!r}: there is no "
            f"annealing); remove it, or set prioritized_replay_beta to the beta you want"
        )


def _say_no_effect(key: str) -> None:
    logger.warning("%s has no effect in rltrainer: %s", key, NO_EFFECT[key])


__all__ = ["FINAL_BETA", "PARENTS", "is_rllib_key", "translate_rllib_keys"]
