"""``.callbacks()``: the ``DefaultCallbacks`` subclass (or list of them) whose hooks run, and
RLlib's callback functions per hook (``callbacks(on_episode_end=fn)``)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator

from rltrainer.algorithms.callbacks import FUNCTION_HOOKS, DefaultCallbacks, check_callbacks_class
from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

#: The config field of each hook's functions (RLlib's names: ``callbacks_on_episode_end``, ...).
FUNCTION_FIELDS: tuple[str, ...] = tuple(f"callbacks_{hook}" for hook in FUNCTION_HOOKS)
KEYS = ("callbacks_class", *FUNCTION_FIELDS)


class CallbacksSettings(ConfigSection):
    """``callbacks()``'s settings."""

    callbacks_class: Any = Field(default_factory=lambda: DefaultCallbacks)
    """A ``DefaultCallbacks`` subclass (or a list of them, run in order, or
    ``"package.module:Class"``) whose hooks run in the driver, env runners and learners."""
    callbacks_on_algorithm_init: Any = None
    """Functions run after ``callbacks_class``'s hook (each ``callbacks_on_<hook>``): a function,
    ``"package.module:function"`` or a list of them, called with the hook's keyword arguments."""
    callbacks_on_train_result: Any = None
    callbacks_on_evaluate_start: Any = None
    callbacks_on_evaluate_end: Any = None
    callbacks_on_checkpoint_loaded: Any = None
    callbacks_on_environment_created: Any = None
    callbacks_on_episode_created: Any = None
    callbacks_on_episode_start: Any = None
    callbacks_on_episode_step: Any = None
    callbacks_on_episode_end: Any = None
    callbacks_on_sample_end: Any = None

    def callbacks(self, callbacks_class: Any = None, **kwargs: Any) -> Self:
        """Which ``DefaultCallbacks`` subclass (or list of them) runs at the hooks of training,
        and RLlib's functions per hook: ``on_episode_end=fn`` (or a list, run in order after
        the class's hook)."""
        if callbacks_class is not None:
            kwargs["callbacks_class"] = callbacks_class
        kwargs = {
            f"callbacks_{key}" if key in FUNCTION_HOOKS else key: value for key, value in kwargs.items()
        }
        return self._update("callbacks", kwargs)

    def callback_functions(self) -> dict[str, Any]:
        """``{hook: functions}`` of the hooks given functions (``callbacks(on_<hook>=...)``)."""
        return {
            hook: getattr(self, field)
            for hook, field in zip(FUNCTION_HOOKS, FUNCTION_FIELDS, strict=True)
            if getattr(self, field) is not None
        }

    @field_validator("callbacks_class")
    @classmethod
    def _callbacks_class(cls, value: Any) -> Any:
        try:
            return check_callbacks_class(value)
        except ConfigError as err:
            raise ValueError(str(err).removeprefix("callbacks(): ")) from None

    @field_validator(*FUNCTION_FIELDS)
    @classmethod
    def _functions(cls, value: Any) -> Any:
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if item is not None and not callable(item) and not isinstance(item, str):
                raise ValueError(
                    f"expected a function, 'package.module:function' or a list of them, got {item!r}"
                )
        return list(value) if isinstance(value, tuple) else value
