"""``AlgorithmConfig``: the typed, validated builder every algorithm is configured with.

The shape follows RLlib's Training APIs (``.environment()``, ``.env_runners()``,
``.training()``, ... each returning ``self``), but every field is declared once, with a
type and a docstring, and every builder method accepts exactly the fields of its section:
an unknown key or a value of the wrong type raises ``ConfigError`` (a ``ValueError``)
naming the key and what is allowed.

Each builder method's fields, their docs and checks live in a section class of their own
(``rltrainer.algorithms.config_sections``: ``environment``, ``env_runners``, ``training``, ...);
``AlgorithmConfig`` inherits them all and keeps what spans the sections: setting keys
(``_update``), the dict round trip, ``validate()`` and ``build()``.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from pydantic import PrivateAttr, ValidationError

from rltrainer.algorithms.aliases import _DICT_NAMES, ALIASES, DOCUMENTED_SETTINGS, AnyOf
from rltrainer.algorithms.config_sections import (
    callbacks,
    checkpointing,
    debugging,
    env_runners,
    environment,
    evaluation,
    exploration,
    fault_tolerance,
    framework,
    multi_agent,
    offline_data,
    python_environment,
    reporting,
    resources,
    training,
)
from rltrainer.algorithms.config_sections.environment import NOT_PROVIDED
from rltrainer.algorithms.config_sections.framework import CompileMode
from rltrainer.algorithms.config_sections.model import Activation, LayerSizes, ModelConfig
from rltrainer.algorithms.config_sections.multi_agent import check_multi_agent
from rltrainer.algorithms.config_sections.section import (
    SECTION_MODEL_CONFIG,
    PiecewiseSchedule,
    field_doc,
)
from rltrainer.algorithms.rllib_keys import translate_rllib_keys
from rltrainer.errors import ConfigError
from rltrainer.tune.search_space import candidates, holds_search_space, malformed_grid
from rltrainer.utils.import_paths import object_path


# The sections in reverse: pydantic collects the fields of the bases last to first, so the
# fields come out in the builder methods' order (environment, env_runners, training, ...), the
# order of to_dict() and of the messages that list settings.
class AlgorithmConfig(
    framework.FrameworkSettings,
    resources.ResourcesSettings,
    fault_tolerance.FaultToleranceSettings,
    offline_data.OfflineDataSettings,
    debugging.DebuggingSettings,
    checkpointing.CheckpointingSettings,
    multi_agent.MultiAgentSettings,
    python_environment.PythonEnvironmentSettings,
    callbacks.CallbacksSettings,
    reporting.ReportingSettings,
    exploration.ExplorationSettings,
    evaluation.EvaluationSettings,
    training.TrainingSettings,
    env_runners.EnvRunnersSettings,
    environment.EnvironmentSettings,
):
    """Settings shared by all algorithms; subclasses add their ``training()`` fields."""

    model_config = SECTION_MODEL_CONFIG

    #: The registry name of the algorithm ``build()`` creates (``None``: pass ``algo_class``).
    ALGORITHM: ClassVar[str | None] = None
    #: The statistics the algorithm's learner reports in every result (its ``STAT_KEYS``).
    STAT_KEYS: ClassVar[tuple[str, ...]] = ()

    #: Whether ``multi_agent()`` configs train (PPO and the replay-based algorithms).
    SUPPORTS_MULTI_AGENT: ClassVar[bool] = False

    #: Builder method name -> the fields it sets. Subclasses extend "training".
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "environment": environment.KEYS,
        # RLlib's current env_runners() also takes explore and the per-runner resources.
        "env_runners": (*env_runners.KEYS, "explore", *resources.ENV_RUNNER_KEYS),
        "training": training.KEYS,
        "evaluation": evaluation.KEYS,
        "exploration": exploration.KEYS,
        "reporting": reporting.KEYS,
        "checkpointing": checkpointing.KEYS,
        "callbacks": callbacks.KEYS,
        "python_environment": python_environment.KEYS,
        "multi_agent": multi_agent.KEYS,
        "debugging": debugging.KEYS,
        "offline_data": offline_data.KEYS,
        "fault_tolerance": fault_tolerance.KEYS,
        "framework": framework.KEYS,
        "resources": resources.KEYS,
        "learners": resources.LEARNER_KEYS,
        "api_stack": (),  # RLlib's no-effect switches only
    }

    _algo_class: type | None = PrivateAttr(default=None)
    # Tune search spaces by field (``training(lr=tune.grid_search([...]))``): ``to_dict()`` hands
    # them to Tune; the field keeps its value until a trial's config resolves them.
    _search_space: dict[str, Any] = PrivateAttr(default_factory=dict)
    # Whether the env is a MultiAgentEnv (created once to find out; None: not asked yet).
    _env_is_multi_agent: bool | None = PrivateAttr(default=None)

    def __init__(self, algo_class: type | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._algo_class = algo_class

    # --- dict round trip -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """All settings as a flat, JSON-serializable dict (``from_dict`` reads it back)."""
        from rltrainer.env.spaces import space_to_json

        out = self.model_dump(exclude={"model"})
        out["model"] = self.model.model_dump()
        if isinstance(self.model.custom_model, type):
            out["model"]["custom_model"] = object_path(self.model.custom_model)
        if "lambda_" in out:
            out["lambda"] = out.pop("lambda_")
        out["input"] = out.pop("input_")  # the documents' key (``input_`` only in Python calls)
        if callable(self.input_):  # a function of the IOContext (e.g. making a PolicyServerInput)
            out["input"] = object_path(self.input_)
        out["framework"] = out.pop("framework_str")
        if isinstance(self.env, type):
            out["env"] = object_path(self.env)
        from rltrainer.policy_spec import policies_to_json

        out["policies"] = policies_to_json(self.policies)
        for key in (
            "env_task_fn",
            "custom_evaluation_function",
            "policy_mapping_fn",
            "policies_to_train",
            "observation_fn",
        ):
            if callable(getattr(self, key)):
                out[key] = object_path(getattr(self, key))
        from rltrainer.algorithms.callbacks import callbacks_to_json

        out["callbacks_class"] = callbacks_to_json(self.callbacks_class)
        for hook, functions in self.callback_functions().items():
            out[f"callbacks_{hook}"] = callbacks_to_json(functions)
        if self.logger_config is not None:
            from rltrainer.results import logger_config_to_json

            out["logger_config"] = logger_config_to_json(self.logger_config)
        kind = self.exploration_config.get("type")
        if isinstance(kind, type):
            out["exploration_config"]["type"] = object_path(kind)
        for key in ("observation_space", "action_space"):
            if out[key] is not None:
                out[key] = space_to_json(out[key])
        out["lr"] = self.lr if isinstance(self.lr, float) else [list(p) for p in self.lr]
        for key, space in self._search_space.items():
            out[_DICT_NAMES.get(key, key)] = space
        return out

    @property
    def search_space(self) -> dict[str, Any]:
        """The settings given as Tune search spaces (empty: a plain config, ``build()`` works)."""
        return dict(self._search_space)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> AlgorithmConfig:
        """Build a config from a flat dict (``to_dict`` output or RLlib-style keys)."""
        return cls().update_from_dict(config)

    def update_from_dict(self, config: dict[str, Any]) -> AlgorithmConfig:
        """Set every key of a flat dict, validating each; RLlib's older names are accepted."""
        if not isinstance(config, dict):
            raise ConfigError(f"a config must be a dict of settings, got {type(config).__name__}")
        from rltrainer.env.spaces import space_from_json

        values = {}
        for key, value in config.items():
            name = ALIASES.get(key, key)
            if name in ("observation_space", "action_space") and isinstance(value, dict):
                value = space_from_json(value)
            values[name] = value
        return self._update("config", values, allowed=tuple(self._all_fields()))

    # RLlib's dict access (``config["lr"]``, ``config["num_workers"] = 2``), older names included.
    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, ALIASES.get(key, key))

    def __setitem__(self, key: str, value: Any) -> None:
        self.update_from_dict({key: value})

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and ALIASES.get(key, key) in type(self).model_fields

    def get(self, key: str, default: Any = None) -> Any:
        """``config[key]`` if ``key`` is a setting (or an older name of one), else ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    @classmethod
    def overrides(cls, **kwargs: Any) -> dict[str, Any]:
        """RLlib's ``AlgorithmConfig.overrides(explore=False, ...)``: the given settings as a dict
        (for ``evaluation_config``, ``PolicySpec(config=...)``), each checked as this config's."""
        cls().update_from_dict(kwargs)
        return dict(kwargs)

    def copy(self, copy_frozen: bool | None = None) -> AlgorithmConfig:  # noqa: ARG002
        """An independent deep copy (RLlib's ``copy_frozen`` argument is accepted and ignored)."""
        return self.model_copy(deep=True)

    # --- building ------------------------------------------------------------------
    @property
    def algo_class(self) -> type | None:
        """The algorithm ``build()`` creates: the one given, else the registry's ``ALGORITHM``."""
        if self._algo_class is None and self.ALGORITHM is not None:
            from rltrainer.algorithms.registry import get_algorithm_class

            return get_algorithm_class(self.ALGORITHM)
        return self._algo_class

    @classmethod
    def result_keys(cls, rllib_names: bool = True) -> list[str]:
        """Every numeric key the algorithm's ``train()`` reports (what stop criteria may name);
        without ``rllib_names``, only rltrainer's own names of them."""
        from rltrainer.results import result_keys_for

        return result_keys_for(cls.STAT_KEYS, rllib_names)

    def build(self, env: Any = None) -> Any:
        """Validate and create the algorithm (RLlib's ``build_algo``)."""
        if env is not None:
            self.environment(env)
        if self.algo_class is None:
            raise ConfigError(
                "this config has no algorithm: build from an algorithm's config, e.g. PPOConfig()"
            )
        return self.algo_class(config=self.copy())

    build_algo = build

    def validate(self) -> None:  # type: ignore[override]
        """Check settings that depend on each other; raises ``ConfigError`` saying what to change."""
        if self._search_space:
            raise ConfigError(
                f"{', '.join(sorted(self._search_space))}: search spaces are resolved by Ray Tune; run "
                f'this config with tune.Tuner("{self.ALGORITHM or "PPO"}", param_space=config) or '
                "`rltrainer train`, which runs a sweep"
            )
        self._check_env_set()
        self._check_training()
        self._check_evaluation_config()
        self._check_offline_data()
        self._check_env_tasks()
        self._check_multi_agent_settings()

    def get_policy_class(self) -> type:
        """The ``Policy`` subclass env runners act with: the algorithm's ``policy_class``, looked
        up in the registry for a registered algorithm (env-runner and learner actors call this:
        importing the algorithm would import Ray Tune in each, 0.7 s of its start)."""
        from rltrainer.policy.policy import Policy

        if self._algo_class is None and self.ALGORITHM is not None:
            from rltrainer.algorithms.registry import get_policy_class

            return get_policy_class(self.ALGORITHM)
        return getattr(self.algo_class, "policy_class", Policy)

    # --- internals -----------------------------------------------------------------
    def _unknown_keys(self, settings: dict[str, Any]) -> list[str]:
        """The keys of ``settings`` that name no setting (nor an older name of one), sorted."""
        return sorted(set(settings) - set(self._all_fields()) - set(ALIASES))

    @classmethod
    def _all_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if name != "framework_str"] + ["framework_str"]

    def _update(
        self, section: str, kwargs: dict[str, Any], allowed: tuple[str, ...] | None = None
    ) -> AlgorithmConfig:
        allowed = allowed if allowed is not None else self.SECTIONS[section]
        kwargs = translate_rllib_keys(self, section, kwargs)  # RLlib's nested keys, no-effect switches
        for key, value in kwargs.items():
            if key not in allowed and ALIASES.get(key) in allowed:
                key = ALIASES[key]  # noqa: PLW2901 - RLlib's older name for the field
            if key in DOCUMENTED_SETTINGS:
                _check_documented_setting(section, key, value)
                continue
            if key not in allowed:
                suggestion = self._suggestion(key, allowed)
                raise ConfigError(
                    f"{section}(): unknown key '{key}'{suggestion}; allowed: {_shown(section, allowed)}"
                )
            if (grid := malformed_grid(value)) is not None:
                raise ConfigError(
                    f"{section}(): the search space of '{key}' is {grid!r}: a grid_search takes a "
                    'non-empty list of values, e.g. {"grid_search": [0.001, 0.0001]}'
                )
            if holds_search_space(value):
                self._set_search_space(section, key, value, allowed)
                continue
            self._search_space.pop(key, None)
            if key in ("input_", "input_config"):
                self._input_sources = None  # listed again from the new setting
            if key == "model":
                value = self._merged_model(value)
            if key == "exploration_config":
                value = self._merged_exploration_config(section, value)
            try:
                setattr(self, key, value)
            except ValidationError as err:
                problem = err.errors()[0]["msg"]
                expected = field_doc(type(self), key)
                # storage_options might hold secrets by mistake: never echo their values.
                got = (
                    f"keys {sorted(value)}"
                    if key == "storage_options" and isinstance(value, dict)
                    else repr(value)
                )
                raise ConfigError(
                    f"{section}(): invalid value for '{key}': {problem} (got {got}). {key}: {expected}"
                ) from None
        if "log_level" in kwargs:
            from rltrainer.utils.debugging import set_log_level

            set_log_level(self.log_level)
        self._apply_batch_size_per_learner(kwargs)
        return self

    def _apply_batch_size_per_learner(self, kwargs: dict[str, Any]) -> None:
        """RLlib's ``train_batch_size_per_learner``: the total batch follows it and ``num_learners``;
        a ``train_batch_size`` set later (alone) replaces it."""
        if "train_batch_size" in kwargs and "train_batch_size_per_learner" not in kwargs:
            self.train_batch_size_per_learner = None
        elif self.train_batch_size_per_learner is not None:
            self.train_batch_size = self.train_batch_size_per_learner * max(1, self.num_learners)

    def _set_search_space(self, section: str, key: str, space: Any, allowed: tuple[str, ...]) -> None:
        """Keep a Tune search space for ``key`` once every value it can take is valid here."""
        for candidate in candidates(space):
            try:
                self.copy()._update(section, {key: candidate}, allowed)
            except ConfigError as err:
                detail = str(err).removeprefix(f"{section}(): ")
                raise ConfigError(
                    f"{section}(): the search space of '{key}' can take {candidate!r}, which is not "
                    f"allowed: {detail}"
                ) from None
        if key == "model":  # Tune resolves the nested spaces inside the full model dict
            space = {**self.model.model_dump(), **space}
        self._search_space[key] = space

    def _suggestion(self, key: str, allowed: tuple[str, ...]) -> str:
        """Where an unknown key belongs: another builder method's field (or RLlib's older name
        of one), else the closest allowed name."""
        name = ALIASES.get(key, key)
        owners = [f".{section}()" for section, fields in self.SECTIONS.items() if name in fields]
        if owners:
            older = f"RLlib's older name of '{name}', " if name != key else ""
            return f" ({older}set by {' or '.join(owners)})"
        hint = difflib.get_close_matches(key, allowed, n=1)
        return f" (did you mean '{hint[0]}'?)" if hint else ""


def _shown(section: str, allowed: tuple[str, ...]) -> str:
    """The allowed keys as the caller writes them: a dict's (``lambda``, ``framework``) for
    ``from_dict``/``--config``, the builder's keyword arguments (``lambda_``) otherwise."""
    names = [_DICT_NAMES.get(name, name) for name in allowed] if section == "config" else allowed
    return ", ".join(names)


def _check_documented_setting(section: str, key: str, value: Any) -> None:
    """Accept ``value`` when it is what rltrainer does anyway, else say why it cannot be had."""
    accepted, reason = DOCUMENTED_SETTINGS[key]
    choices = accepted if isinstance(accepted, AnyOf) else (accepted,)
    if any(value == choice and type(value) is type(choice) for choice in choices):
        return
    raise ConfigError(
        f"{section}(): {key}={value!r} cannot take effect in rltrainer ({reason}); "
        f"remove it or set {key}={choices[0]!r}"
    )


__all__ = [  # the tables, the sections' types and check_multi_agent: re-exported for older imports
    "ALIASES",
    "DOCUMENTED_SETTINGS",
    "NOT_PROVIDED",
    "Activation",
    "AlgorithmConfig",
    "CompileMode",
    "LayerSizes",
    "ModelConfig",
    "PiecewiseSchedule",
    "check_multi_agent",
]
