"""``.python_environment()`` (RLlib's section): environment variables for the driver and the
remote env runners."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "extra_python_environs_for_driver",
    "extra_python_environs_for_worker",
)


class PythonEnvironmentSettings(ConfigSection):
    """``python_environment()``'s settings."""

    extra_python_environs_for_driver: dict[str, str] = Field(default_factory=dict)
    """Environment variables set in the driver process when the algorithm is built."""
    extra_python_environs_for_worker: dict[str, str] = Field(default_factory=dict)
    """Environment variables set in every remote env runner (training and evaluation) as it
    starts, before its envs are made (e.g. an env's own settings, thread counts)."""

    def python_environment(self, **kwargs: Any) -> Self:
        """Environment variables for the driver and the remote env runners (RLlib's section)."""
        return self._update("python_environment", kwargs)
