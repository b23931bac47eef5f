"""``.training()``: the optimization settings every algorithm shares (each algorithm's config adds
its own) and the network (``model``, a ``ModelConfig``)."""

from __future__ import annotations

import difflib
from typing import Any, Literal, Self

from pydantic import Field, ValidationError, field_validator

from rltrainer.algorithms.config_sections.model import ModelConfig
from rltrainer.algorithms.config_sections.section import ConfigSection, PiecewiseSchedule, check_schedule
from rltrainer.errors import ConfigError

KEYS = (
    "gamma",
    "lr",
    "grad_clip",
    "grad_clip_by",
    "train_batch_size",
    "train_batch_size_per_learner",
    "model",
)


class TrainingSettings(ConfigSection):
    """``training()``'s settings shared by all algorithms."""

    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    lr: float | PiecewiseSchedule = 5e-5
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    grad_clip: float | None = Field(None, gt=0)
    """Clip gradients (see ``grad_clip_by``); ``None`` disables clipping."""
    grad_clip_by: Literal["value", "norm", "global_norm"] = "global_norm"
    """Clip each element, each tensor's norm, or the norm over all tensors."""
    train_batch_size: int = Field(4000, ge=1)
    """Env steps collected per training iteration."""
    train_batch_size_per_learner: int | None = Field(None, ge=1)
    """RLlib's new-stack batch size: when set, ``train_batch_size`` is this times
    ``max(1, num_learners)`` (kept so whichever of the two is set later); ``None``: unset."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Network architecture; ``training(model={...})`` updates only the keys given."""

    def training(self, **kwargs: Any) -> Self:
        """Optimization settings (subclasses add their algorithm's own)."""
        return self._update("training", kwargs)

    def rl_module(
        self,
        *,
        model_config: Any = None,
        rl_module_spec: Any = None,
        algorithm_config_overrides_per_module: Any = None,
        model_config_dict: Any = None,
    ) -> Self:
        """RLlib's new-stack builder, for its network settings: ``model_config`` (a
        ``DefaultModelConfig`` or a dict of its keys; ``model_config_dict``, RLlib's older name)
        sets the equivalent ``model`` settings. Custom RLModules are refused, saying what to write."""
        if rl_module_spec is not None:
            raise ConfigError(
                "rl_module(): rl_module_spec: custom RLModules belong to RLlib's new API stack, which "
                "rltrainer does not implement; write the network as a TorchModelV2 custom model "
                "(training(model={'custom_model': ...}); docs/guide/models.md)"
            )
        if algorithm_config_overrides_per_module is not None:
            raise ConfigError(
                "rl_module(): algorithm_config_overrides_per_module: a policy's own settings are "
                "PolicySpec(config={...}) in multi_agent(policies={...})"
            )
        if model_config is not None and model_config_dict is not None:
            raise ConfigError(
                "rl_module(): give model_config or model_config_dict (its older name), not both"
            )
        given = model_config if model_config is not None else model_config_dict
        if given is None:
            return self
        from rltrainer.core.rl_module.default_model_config import model_settings

        return self._update("training", {"model": model_settings(given)})

    def _check_training(self) -> None:
        if isinstance(self.lr, list):
            check_schedule("lr", self.lr)

    def _merged_model(self, value: Any) -> ModelConfig:
        if isinstance(value, ModelConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"training(): 'model' must be a dict, got {type(value).__name__}")
        merged = {**self.model.model_dump(), **value}
        try:
            return ModelConfig(**merged)
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            if problem["type"] == "extra_forbidden":
                hint = difflib.get_close_matches(where, list(ModelConfig.model_fields), n=1)
                guess = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise ConfigError(
                    f"training(): unknown model setting '{where}'{guess}; "
                    f"allowed keys: {', '.join(ModelConfig.model_fields)}"
                ) from None
            message = problem["msg"].removeprefix("Value error, ")
            raise ConfigError(f"training(): invalid model setting '{where}': {message}") from None

    @field_validator("lr")
    @classmethod
    def _non_negative_lr(cls, lr: Any) -> Any:
        values = [lr] if isinstance(lr, float) else [v for _, v in lr]
        if any(v < 0 for v in values):
            raise ValueError("learning rates must be >= 0")
        return lr
