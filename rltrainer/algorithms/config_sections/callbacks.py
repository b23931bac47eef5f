"""``.callbacks()``: the ``DefaultCallbacks`` subclass (or list of them) whose hooks run."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

KEYS = ("callbacks_class",)


class CallbacksSettings(ConfigSection):
    """``callbacks()``'s setting."""

    callbacks_class: Any = Field(default_factory=lambda: _default_callbacks())
    """A ``DefaultCallbacks`` subclass (or a list of them, run in order, or
    ``"package.module:Class"``) whose hooks run in the driver, env runners and learners."""

    def callbacks(self, callbacks_class: Any = None, **kwargs: Any) -> Self:
        """Which ``DefaultCallbacks`` subclass (or list of them) runs at the hooks of training."""
        if callbacks_class is not None:
            kwargs["callbacks_class"] = callbacks_class
        return self._update("callbacks", kwargs)

    @field_validator("callbacks_class")
    @classmethod
    def _callbacks_class(cls, value: Any) -> Any:
        from rltrainer.algorithms.callbacks import check_callbacks_class

        try:
            return check_callbacks_class(value)
        except ConfigError as err:
            raise ValueError(str(err).removeprefix("callbacks(): ")) from None


def _default_callbacks() -> type:
    from rltrainer.algorithms.callbacks import DefaultCallbacks

    return DefaultCallbacks
