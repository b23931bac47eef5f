"""Is an ``RLExperiment`` body runnable? The models' checks, then what a schema cannot know.

``validate_experiment`` parses the body with the pydantic models (the same rules the CRD's
schema gives the API server) and then checks with rltrainer itself: the algorithm's ``config``
keys and values, the ``stop`` keys, and that ``config`` leaves alone what the spec owns
(replicas, resources, storage, checkpointing, fault tolerance, the env), that a sweep (search
spaces in ``config``, or ``spec.tune``) is one the driver can run (rltrainer's ``check_sweep``:
the metric, the scheduler's settings, PBT mutations), and that
``rayVersion`` is one KubeRay can run the trainer image with. Every problem is an
``InvalidSpec`` naming the field. Pure: no API calls, and nothing from the trainer image is
imported (a custom exploration class is checked by the driver, where it lives).
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from rltrainer.algorithms.algorithm_config import ALIASES, DOCUMENTED_SETTINGS, AlgorithmConfig
from rltrainer.algorithms.registry import get_config_class
from rltrainer.algorithms.rllib_keys import is_rllib_key
from rltrainer.errors import ConfigError
from rltrainer.storage import check_experiment_name
from rltrainer.tune.search_space import candidates, holds_search_space
from rltrainer.tune.sweep_settings import SCHEDULER_SETTINGS, check_sweep
from rltrainer_operator.models import (
    NAME_PATTERN,
    QUANTITY_PATTERN,
    RAY_VERSION_PATTERN,
    REGION_PATTERN,
    S3_URI_PATTERN,
    URL_PATTERN,
    ExperimentSpec,
    RLExperiment,
    field_path,
)
from rltrainer_operator.sweep import is_sweep, searched_config, sweep_settings

#: Config keys (rltrainer's names; RLlib's older aliases map onto them) that the spec sets.
OWNED_CONFIG_KEYS: dict[str, str] = {
    "env": "spec.env",
    "env_config": "spec.envConfig",
    "num_env_runners": "spec.rollouts.replicas",
    "num_envs_per_env_runner": "spec.rollouts.envsPerRunner",
    "num_cpus_per_env_runner": "spec.rollouts.cpusPerRunner",
    "num_gpus_per_env_runner": "spec.learners.gpusPerLearner (rollout pods have no GPUs)",
    "custom_resources_per_env_runner": "spec.rollouts (the operator ties env runners to rollout pods)",
    "num_learners": "spec.learners.replicas",
    "num_gpus_per_learner": "spec.learners.gpusPerLearner",
    "num_cpus_per_learner": "spec.learners.cpusPerLearner",
    "custom_resources_per_learner": "spec.learners (the operator ties learners to learner pods)",
    "num_gpus": "spec.learners.gpusPerLearner (the head has no GPU)",
    "storage_path": "spec.checkpoint.uri",
    "storage_options": "spec.storage",
    "experiment_name": "metadata.name",
    "checkpoint_frequency": "spec.checkpoint.frequency",
    "checkpoint_at_end": "spec.checkpoint.atEnd",
    "num_to_keep": "spec.checkpoint.numToKeep",
    "restart_failed_env_runners": "spec.faultTolerance.restartFailedEnvRunners",
    "max_num_env_runner_restarts": "spec.faultTolerance.maxEnvRunnerRestarts",
    "delay_between_env_runner_restarts_s": "spec.faultTolerance.envRunnerRestartDelaySeconds",
    "restart_failed_learners": "spec.faultTolerance.restartFailedLearners",
    "max_num_learner_restarts": "spec.faultTolerance.maxLearnerRestarts",
    "learner_restart_timeout_s": "spec.faultTolerance.learnerRestartTimeoutSeconds",
    "placement_timeout_s": "the operator (its provision timeout: worker pods may still be starting)",
}

#: The oldest ``rayVersion`` the trainer image can be run as. Below 2.53 KubeRay (v1.5+) probes
#: the Ray containers with ``wget`` exec probes (``supportsUnifiedHealthCheck`` in its
#: ``common/pod.go``), and the image has no ``wget``: its Pods would never become ready. From 2.53
#: KubeRay asks the dashboard agent's ``/api/healthz`` over HTTP. (Token authentication, the
#: default ``rayAuth``, needs Ray 2.52: covered.) The image itself runs Ray 2.60.
RAY_VERSION_FLOOR = (2, 53, 0)

#: What the models' patterns mean, for messages.
_PATTERNS = {
    S3_URI_PATTERN: "an s3://bucket or s3://bucket/prefix URI with a lower-case, DNS-compatible bucket name",
    QUANTITY_PATTERN: "a Kubernetes quantity such as 4Gi, 500m or 2",
    NAME_PATTERN: "a lower-case DNS name (a-z, 0-9, '-', '.')",
    URL_PATTERN: "an http:// or https:// URL",
    REGION_PATTERN: "a region name such as us-east-1",
    RAY_VERSION_PATTERN: "a Ray version such as 2.60.0",
}
#: pydantic's bound errors -> the comparison they ask for.
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


class InvalidSpec(ValueError):  # noqa: N818 (the condition reason it becomes)
    """An ``RLExperiment`` that cannot run as written; ``str()`` is one line naming the field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def validate_experiment(body: Mapping[str, Any]) -> RLExperiment:
    """The body as the models, or ``InvalidSpec`` for its first problem."""
    try:
        experiment = RLExperiment.model_validate(body)
    except ValidationError as err:
        raise _invalid_from_pydantic(err) from None
    spec = experiment.spec
    _check_name(body)
    _check_dropped_nulls(body)
    _check_json("spec.envConfig", spec.envConfig)
    _check_json("spec.config", spec.config)
    config = _check_config(spec)
    _check_stop(spec)
    _check_sweep(spec, config)
    _check_ray_version(spec)
    return experiment


def _check_name(body: Mapping[str, Any]) -> None:
    """The name becomes the driver's ``--name``: one folder under the checkpoint URI."""
    name = (body.get("metadata") or {}).get("name")
    if name is None:
        return
    try:
        check_experiment_name(name, "the RLExperiment's name")
    except ConfigError as err:
        raise InvalidSpec("metadata.name", str(err)) from None


def _check_config(spec: ExperimentSpec) -> AlgorithmConfig:
    """Each ``config`` key through rltrainer's own validation, then the config as a whole (for a
    sweep, once per value its search spaces can take). Returns the config, search spaces kept."""
    config = get_config_class(spec.algorithm)()
    fields = type(config).model_fields
    with _logger_level_kept():  # setting log_level changes the process's rltrainer logger
        for key, value in spec.config.items():
            path = f"spec.config.{key}"
            name = ALIASES.get(key, key)
            if name in OWNED_CONFIG_KEYS:
                alias = f" (RLlib's name for {name})" if name != key else ""
                raise InvalidSpec(path, f"is set by {OWNED_CONFIG_KEYS[name]}{alias}: remove it from config")
            if name not in fields and name not in DOCUMENTED_SETTINGS and not is_rllib_key(key):  # say why
                raise InvalidSpec(path, _unknown_key(spec.algorithm, key, fields))
            if _names_a_class_in_the_image(name, value):
                continue
            try:
                config.update_from_dict({key: value})
            except ConfigError as err:
                raise InvalidSpec(path, _without_section(str(err))) from None
        try:
            config.environment(env=spec.env, env_config=spec.envConfig)
        except ConfigError as err:
            raise InvalidSpec("spec.config", _without_section(str(err))) from None
        if not config.search_space:
            _check_whole_config(config, "")
        else:
            for trial, where in _trial_configs(spec):
                _check_whole_config(trial, where)
    return config


def _unknown_key(algorithm: str, key: str, fields: Mapping[str, Any]) -> str:
    allowed = sorted(set(fields) - set(OWNED_CONFIG_KEYS) - {"framework_str"})
    hint = difflib.get_close_matches(key, allowed, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return f"unknown {algorithm} config key{suggestion}; allowed: {', '.join(allowed)}"


def _check_whole_config(config: AlgorithmConfig, where: str) -> None:
    """``validate()`` (settings that depend on each other), and no evaluation env runners."""
    try:
        config.validate()
    except ConfigError as err:
        raise InvalidSpec("spec.config", _without_section(str(err)) + where) from None
    if config.evaluation_num_env_runners:
        raise InvalidSpec(
            "spec.config.evaluation_num_env_runners",
            "the operator provisions no pods for evaluation env runners: leave it 0 (evaluation "
            "then runs in the driver, evaluation_interval and evaluation_duration still apply)" + where,
        )


def _trial_configs(spec: ExperimentSpec) -> Iterator[tuple[AlgorithmConfig, str]]:
    """A sweep's configs as its trials get them, each with `` (in the trial with ...)``: every
    search space at its first value, then each other value of each with the rest at their first
    (a grid's every value, a range's bounds; the cross-field checks a trial's driver would fail)."""
    searched = {k: v for k, v in searched_config(spec).items() if holds_search_space(v)}
    options = {key: candidates(value) for key, value in searched.items()}
    firsts = {key: values[0] for key, values in options.items() if values}
    variants = [firsts] + [{**firsts, key: value} for key, values in options.items() for value in values[1:]]
    plain = {
        key: value
        for key, value in spec.config.items()
        if key not in searched and not _names_a_class_in_the_image(ALIASES.get(key, key), value)
    }
    for values in variants:
        config = get_config_class(spec.algorithm)()
        where = ", ".join(f"{key}={value!r}" for key, value in values.items())
        where = f" (in the trial with {where})" if where else ""
        settings = {key: value for key, value in values.items() if key != "env_config"}
        try:
            config.update_from_dict({**plain, **settings})
            config.environment(env=spec.env, env_config=values.get("env_config", spec.envConfig))
        except ConfigError as err:
            raise InvalidSpec("spec.config", _without_section(str(err)) + where) from None
        yield config, where


def _check_sweep(spec: ExperimentSpec, config: AlgorithmConfig) -> None:
    """A sweep's settings through rltrainer's ``check_sweep`` (what the driver checks before any
    trial starts): the metric, the scheduler's settings, PBT's mutations."""
    if not is_sweep(spec):
        if spec.tune is not None:
            raise InvalidSpec(
                "spec.tune",
                "makes no sweep: a sweep needs search spaces in spec.config (e.g. lr: {grid_search: "
                "[0.001, 0.0001]}), numSamples > 1 or a scheduler (asha, pbt); remove spec.tune for one run",
            )
        return
    settings = sweep_settings(spec)
    mutations = settings.scheduler_config.get("hyperparam_mutations")
    fields = type(config).model_fields
    for key in mutations if isinstance(mutations, dict) else {}:
        path, name = f"spec.tune.schedulerConfig.hyperparam_mutations.{key}", ALIASES.get(key, key)
        if name in OWNED_CONFIG_KEYS:
            raise InvalidSpec(path, f"is set by {OWNED_CONFIG_KEYS[name]}: trials cannot change it")
        if name not in fields:
            raise InvalidSpec(path, _unknown_key(spec.algorithm, key, fields))
    try:
        with _logger_level_kept():
            check_sweep(config, dict(spec.stop), settings)
    except ConfigError as err:
        raise _sweep_error(str(err), settings.scheduler, settings.scheduler_config) from None


#: ``check_sweep``'s messages -> the spec field they are about.
_MUTATION = re.compile(r"^pbt scheduler: hyperparam_mutations\[(?P<key>'[^']*'|\"[^\"]*\")\]: (?P<rest>.*)$")
_SWEEP_FIELDS = (
    ("unknown metric", "spec.tune.metric"),
    ("num_samples", "spec.tune.numSamples"),
    ("max_concurrent_trials", "spec.tune.maxConcurrentTrials"),
    ("unknown scheduler", "spec.tune.scheduler"),
    ("mode", "spec.tune.mode"),
    ("pbt scheduler: set hyperparam_mutations", "spec.tune.schedulerConfig.hyperparam_mutations"),
)


def _sweep_error(message: str, scheduler: str, scheduler_config: Mapping[str, Any]) -> InvalidSpec:
    """``check_sweep``'s ``ConfigError`` as an ``InvalidSpec`` naming the field."""
    match = _MUTATION.match(message)
    if match:
        key = match.group("key")[1:-1]
        field = f"spec.tune.schedulerConfig.hyperparam_mutations.{key}"
        return InvalidSpec(field, _without_section(match.group("rest")))
    unknown = sorted(set(scheduler_config) - set(SCHEDULER_SETTINGS.get(scheduler, {})))
    if unknown and message.startswith(f"{scheduler} scheduler: unknown setting"):
        return InvalidSpec(f"spec.tune.schedulerConfig.{unknown[0]}", message)
    for prefix, field in _SWEEP_FIELDS:
        if message.startswith(prefix):
            return InvalidSpec(field, message)
    return InvalidSpec("spec.tune", message)


def _check_stop(spec: ExperimentSpec) -> None:
    """Stop keys must be results the algorithm reports (rltrainer's ``resolve_stop``)."""
    from rltrainer.experiment import resolve_stop

    config_class = get_config_class(spec.algorithm)
    for key, value in spec.stop.items():
        if math.isnan(value):
            raise InvalidSpec(f"spec.stop.{key}", "must be a number, got NaN")
        try:
            resolve_stop({key: value}, config_class)
        except ConfigError as err:
            raise InvalidSpec(f"spec.stop.{key}", str(err)) from None


def _check_ray_version(spec: ExperimentSpec) -> None:
    """``rayVersion`` tells KubeRay how to probe the Ray containers: below ``RAY_VERSION_FLOOR``
    it probes with ``wget``, which the trainer image lacks."""
    version = tuple(int(part) for part in spec.rayVersion.split("."))
    if version < RAY_VERSION_FLOOR:
        floor = ".".join(map(str, RAY_VERSION_FLOOR))
        raise InvalidSpec(
            "spec.rayVersion",
            f"{spec.rayVersion} is below {floor}: KubeRay probes Ray older than {floor} with wget, "
            f"which rltrainer's trainer image does not have (its Pods would never become ready), and "
            f"rltrainer runs on Ray 2.60 in any image: set rayVersion to the image's Ray, {floor} or newer",
        )


#: Where ``kubectl apply`` (client side) keeps the manifest as written, nulls included.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _check_dropped_nulls(body: Mapping[str, Any]) -> None:
    """A null under ``spec.config``/``spec.envConfig`` that ``kubectl apply`` dropped.

    Apply treats null as "delete this field", so ``vf_clip_param: null`` (no value clipping)
    never reaches the API server and the driver would silently run with the default (10).
    Client-side apply keeps the manifest as written in an annotation: a null there whose key
    is missing from the live spec is reported instead of trained on. (Server-side apply and
    GitOps tools drop nulls too, without such a record; the README says so.)
    """
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    try:
        applied = json.loads(annotations.get(LAST_APPLIED) or "{}").get("spec") or {}
    except (ValueError, AttributeError):
        return  # not ours to judge: someone else's annotation
    live = body.get("spec") or {}
    for field in ("config", "envConfig"):
        path = _dropped_null(applied.get(field), live.get(field), f"spec.{field}")
        if path is not None:
            raise InvalidSpec(
                path,
                "is null in the applied manifest, and kubectl apply drops null fields, so the "
                "default would silently be used instead; remove the key to mean the default, or "
                "give a value (to turn vf_clip_param or grad_clip off: a large bound such as 10000.0)",
            )


def _dropped_null(applied: Any, live: Any, path: str) -> str | None:
    """The first path holding null in ``applied`` and nothing in ``live``, or None."""
    if not isinstance(applied, dict):
        return None
    live = live if isinstance(live, dict) else {}
    for key, value in applied.items():
        if value is None and key not in live:
            return f"{path}.{key}"
        found = _dropped_null(value, live.get(key), f"{path}.{key}")
        if found is not None:
            return found
    return None


def _check_json(path: str, value: dict[str, Any]) -> None:
    """The driver receives these as JSON: no NaN, no infinities, nothing JSON has no type for."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidSpec(
            path, f"must be plain JSON (strings, numbers, booleans, lists, maps): {err}"
        ) from None


def _names_a_class_in_the_image(name: str, value: Any) -> bool:
    """``exploration_config: {type: "pkg.module:Class"}``, ``logger_config: {type: ...}`` and
    ``callbacks_class: "pkg.module:Class"`` (or a list) name code in the trainer image:
    importing it here would run a user's module in the operator (and fail where it is absent).
    The driver imports them when it builds the algorithm."""
    if name in ("exploration_config", "logger_config") and isinstance(value, dict):
        value = value.get("type")
    elif name != "callbacks_class":
        return False
    paths = value if isinstance(value, list) else [value]
    return any(isinstance(path, str) and (":" in path or "." in path) for path in paths)


def _without_section(message: str) -> str:
    """rltrainer's ``"config(): unknown key ..."`` -> ``"unknown key ..."`` (the path says where)."""
    head, sep, rest = message.partition("(): ")
    return rest if sep and head.isidentifier() else message


@contextmanager
def _logger_level_kept() -> Iterator[None]:
    logger = logging.getLogger("rltrainer")
    level = logger.level
    try:
        yield
    finally:
        logger.setLevel(level)


# --- pydantic errors as one line ------------------------------------------------------------


def _invalid_from_pydantic(err: ValidationError) -> InvalidSpec:
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = tuple(first["loc"])
    message = _error_message(first)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return InvalidSpec(field_path(loc) or "body", message)


def _error_message(error: Mapping[str, Any]) -> str:
    kind, loc, ctx = error["type"], tuple(error["loc"]), error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        allowed = _fields_at(loc[:-1])
        return "unknown field" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        return f"must be {_BOUNDS[kind]} {bound} (got {_short(error['input'])})"
    if kind == "string_pattern_mismatch":
        wanted = _PATTERNS.get(ctx.get("pattern"), f"a string matching {ctx.get('pattern')}")
        return f"must be {wanted} (got {_short(error['input'])})"
    text = error["msg"]
    for noun in ("Input", "String", "Value", "Dictionary", "List"):
        if text.startswith(f"{noun} should "):
            text = "must " + text[len(noun) + len(" should ") :]
            break
    return f"{text} (got {_short(error['input'])})"


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model at ``loc`` (``("spec", "rollouts")`` -> Rollouts' fields)."""
    model: type[BaseModel] | None = RLExperiment
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if model else None
        model = _model_in(field.annotation) if field else None
    return list(model.model_fields) if model else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class in ``Model``, ``Model | None`` or ``list[Model]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        model = _model_in(arg)
        if model is not None:
            return model
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
