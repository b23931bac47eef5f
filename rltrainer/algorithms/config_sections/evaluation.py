"""``.evaluation()``: when and how long to evaluate, on which env runners, with which config
overrides (``evaluation_config``), and the checks of those settings."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

KEYS = (
    "evaluation_interval",
    "evaluation_duration",
    "evaluation_duration_unit",
    "off_policy_estimation_methods",
    "evaluation_sample_timeout_s",
    "evaluation_parallel_to_training",
    "evaluation_force_reset_envs_before_iteration",
    "evaluation_config",
    "evaluation_num_env_runners",
    "custom_evaluation_function",
    "always_attach_evaluation_results",
)


class EvaluationSettings(ConfigSection):
    """``evaluation()``'s settings."""

    evaluation_interval: int | None = Field(None, ge=0)
    """Evaluate every this many ``train()`` calls; ``None`` (or 0) never evaluates automatically."""
    evaluation_duration: Annotated[int, Field(ge=1)] | Literal["auto"] = 10
    """How many episodes (or timesteps, see the unit) one evaluation runs, split among the
    evaluation env runners; ``"auto"`` (with ``evaluation_parallel_to_training``): as long as
    the training step runs."""
    evaluation_duration_unit: Literal["episodes", "timesteps"] = "episodes"
    """Unit of ``evaluation_duration``."""
    off_policy_estimation_methods: dict[str, Any] = Field(default_factory=dict)
    """``{name: {"type": "is" | "wis" | "dm" | "dr", "q_model_config": {...}}}``: estimate the
    current policy's return from recorded episodes at each evaluation (``evaluation_duration``
    of them), reported under ``evaluation/off_policy_estimator/<name>/`` (see
    ``rltrainer.offline.estimators``)."""
    evaluation_sample_timeout_s: float = Field(120.0, gt=0)
    """How long to wait for remote evaluation runners' samples: a runner that misses it is
    handled per the fault-tolerance settings and the evaluation ends with what arrived."""
    evaluation_parallel_to_training: bool = False
    """Evaluate on the remote evaluation runners while the training step runs, with the
    weights from before that step (needs ``evaluation_num_env_runners >= 1``)."""
    evaluation_force_reset_envs_before_iteration: bool = True
    """Reset the evaluation envs before each evaluation; ``False`` continues the episodes the
    last evaluation left running (their returns then mix older weights in)."""
    evaluation_config: dict[str, Any] | None = None
    """Config overrides for evaluation, e.g. ``{"explore": False}`` or
    ``{"env_config": {...}}`` (any setting; ``num_env_runners`` is ``evaluation_num_env_runners``)."""
    evaluation_num_env_runners: int = Field(0, ge=0)
    """Remote evaluation env-runner actors (own placement-group bundles, restarted like the
    training ones); 0 evaluates in the driver."""
    custom_evaluation_function: Any = None
    """``fn(algorithm, eval_workers) -> dict`` of metrics, run instead of the built-in
    evaluation (``eval_workers``: the evaluation ``EnvRunnerGroup``, weights already synced).
    A function or ``"package.module:function"``."""
    always_attach_evaluation_results: bool = False
    """Report the latest evaluation results in iterations that do not evaluate too."""

    def evaluation(self, **kwargs: Any) -> Self:
        """When and how long to evaluate, with which config overrides."""
        return self._update("evaluation", kwargs)

    def get_evaluation_config(self) -> Self:
        """This config with ``evaluation_config`` applied (``env_config`` is merged into the
        training one, as RLlib does: keys not given keep their values)."""
        clone = self.copy()
        if self.evaluation_config:
            overrides = dict(self.evaluation_config)
            if isinstance(overrides.get("env_config"), dict):
                overrides["env_config"] = _deep_merge(self.env_config, overrides["env_config"])
            clone.update_from_dict(overrides)
        return clone

    def _check_evaluation_config(self) -> None:
        if self.evaluation_config:
            unknown = self._unknown_keys(self.evaluation_config)
            if unknown:
                guess = self._suggestion(unknown[0], tuple(self._all_fields()))
                raise ConfigError(
                    f"evaluation_config has unknown key(s) {unknown}{guess}; "
                    f"allowed: {', '.join(self._all_fields())}"
                )
            try:
                self.get_evaluation_config()
            except ConfigError as err:
                raise ConfigError(f"evaluation_config: {str(err).removeprefix('config(): ')}") from None
        self._check_evaluation()

    def _check_evaluation(self) -> None:
        """RLlib's rules: parallel evaluation needs remote evaluation runners; "auto" needs parallel."""
        if self.evaluation_parallel_to_training and self.evaluation_num_env_runners == 0:
            raise ConfigError(
                "evaluation_parallel_to_training=True needs remote evaluation runners: set "
                "evaluation_num_env_runners >= 1, or evaluation_parallel_to_training=False"
            )
        if self.evaluation_duration == "auto" and not self.evaluation_parallel_to_training:
            raise ConfigError(
                "evaluation_duration='auto' (evaluate as long as the training step runs) needs "
                "evaluation_parallel_to_training=True; otherwise give a number of episodes or timesteps"
            )

    @field_validator("off_policy_estimation_methods")
    @classmethod
    def _estimators(cls, methods: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.estimators import check_estimators

        return check_estimators(methods)

    @field_validator("custom_evaluation_function")
    @classmethod
    def _custom_evaluation_function(cls, fn: Any) -> Any:
        if fn is None or callable(fn) or (isinstance(fn, str) and ":" in fn.strip(":")):
            return fn  # a name is imported when the algorithm is built (not by the operator)
        raise ValueError('must be a function (algorithm, eval_workers) -> dict, or "package.module:function"')


def _deep_merge(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``updates``, nested dicts merged key by key."""
    merged = dict(base)
    for key, value in updates.items():
        old = merged.get(key)
        merged[key] = _deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged
