"""``.reporting()``: metric smoothing, iteration length, and where results are written."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "metrics_num_episodes_for_smoothing",
    "min_time_s_per_iteration",
    "min_sample_timesteps_per_iteration",
    "storage_path",
    "storage_options",
    "experiment_name",
    "keep_per_episode_custom_metrics",
)


class ReportingSettings(ConfigSection):
    """``reporting()``'s settings."""

    metrics_num_episodes_for_smoothing: int = Field(100, ge=1)
    """Episodes averaged in ``episode_return_mean`` and friends."""
    min_time_s_per_iteration: float = Field(0.0, ge=0)
    """Repeat training steps within one ``train()`` until this much time passed."""
    min_sample_timesteps_per_iteration: int = Field(0, ge=0)
    """Repeat training steps within one ``train()`` until this many env steps were sampled."""
    storage_path: str = "~/rltrainer_results"
    """Where ``<experiment_name>/<trial_id>/`` results and checkpoints go: a directory or ``s3://bucket/prefix``."""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    """S3 settings over the AWS environment and config files: ``endpoint_url``, ``region_name``,
    ``profile_name``, ``verify``, ``connect_timeout``, ``read_timeout``, ``max_attempts``,
    ``retry_delay_s`` (never credentials: the config is saved in every checkpoint)."""
    experiment_name: str | None = None
    """Results folder name; defaults to ``<ALGO>_<env>``."""
    keep_per_episode_custom_metrics: bool = False
    """Report each custom metric's per-episode values (``custom_metrics/<name>``, a list)
    instead of their ``_mean``, ``_min`` and ``_max``."""

    def reporting(self, **kwargs: Any) -> Self:
        """Metric smoothing, iteration length, and where results are written."""
        return self._update("reporting", kwargs)

    @field_validator("storage_options")
    @classmethod
    def _storage_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.storage import check_storage_options

        return check_storage_options(options)
