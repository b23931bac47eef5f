"""``.debugging()``: log level, random seed, what a non-finite number does, and result writers."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "log_level",
    "seed",
    "logger_config",
    "on_nonfinite",
)


class DebuggingSettings(ConfigSection):
    """``debugging()``'s settings."""

    log_level: Literal["DEBUG", "INFO", "WARN", "WARNING", "ERROR"] = "WARN"
    """Level of the ``rltrainer`` logger."""
    on_nonfinite: Literal["stop", "skip_batch"] = "stop"
    """NaN or infinity in an env's observations or rewards, or in a loss: ``"stop"`` ends training
    with a ``NumericalError`` saying where (env runner, sub-env and step; or the loss terms);
    ``"skip_batch"`` warns and drops it (the fragment's steps, or the gradient step) instead."""
    seed: int | None = None
    """Seeds torch, numpy and the envs (each env gets its own derived seed), in the driver, the
    env runners and the learners: the same seed and config give the same results."""
    logger_config: dict[str, Any] | None = None
    """Result writers: ``{"type": NAME or [NAME, ...]}``, a NAME being ``"json"`` (result.json),
    ``"csv"`` (progress.csv), ``"tensorboard"`` (event file), Tune's ``JsonLogger``,
    ``CSVLogger``, ``TBXLogger`` or ``UnifiedLogger`` (all three), or a class
    (``"package.module:Class"``; see ``rltrainer.results``); ``None``: all three."""

    def debugging(self, **kwargs: Any) -> Self:
        """Log level, random seed and result writers."""
        return self._update("debugging", kwargs)

    @field_validator("logger_config")
    @classmethod
    def _logger_config(cls, config: dict[str, Any] | None) -> dict[str, Any] | None:
        from rltrainer.results import check_logger_config

        return config if config is None else check_logger_config(config)
