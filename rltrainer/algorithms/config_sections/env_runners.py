"""``.env_runners()`` (RLlib 2.x: ``.rollouts()``): how many env runners sample, with how many
vectorized envs, in what batch mode."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "num_env_runners",
    "num_envs_per_env_runner",
    "rollout_fragment_length",
    "batch_mode",
    "observation_filter",
    "sample_timeout_s",
    "horizon",
    "compress_observations",
    "remote_worker_envs",
)


class EnvRunnersSettings(ConfigSection):
    """``env_runners()``'s settings."""

    num_env_runners: int = Field(0, ge=0)
    """Remote env-runner actors; 0 samples in the driver process without starting Ray."""
    num_envs_per_env_runner: int = Field(1, ge=1)
    """Vectorized envs stepped together by each env runner (batched inference)."""
    rollout_fragment_length: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """Steps per env per sample call; "auto" divides ``train_batch_size`` evenly."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    """Cut rollouts at the fragment length (bootstrapping values) or only at episode ends."""
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "NoFilter"
    """Normalize observations with running mean/std statistics."""
    sample_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for remote env runners' samples before failing."""
    compress_observations: bool = False
    """Remote env runners send their rollouts' observations lz4-compressed (the driver unpacks
    them): less to move between nodes for pixel observations, at the cost of compressing (see
    the README's figures); nothing changes without remote env runners."""
    horizon: int | None = Field(None, gt=0)
    """Truncate every episode after this many env steps (RLlib's; a ``TimeLimit`` on each env
    copy, so the truncated episodes bootstrap); ``None``: episodes end when the env ends them."""
    remote_worker_envs: bool = False
    """With ``num_envs_per_env_runner > 1``: each of a runner's envs lives in its own Ray actor
    (no CPU reserved) and they step in parallel, each step waiting for all of them. Only worth
    its overheads (a round trip per env and step) for envs slow to step or reset; single-agent
    envs only, without ``env_task_fn`` (see ``rltrainer.env.remote_vector_env``)."""

    def env_runners(self, **kwargs: Any) -> Self:
        """How many env runners sample, with how many vectorized envs, in what batch mode."""
        return self._update("env_runners", kwargs)

    rollouts = env_runners  # the name of RLlib 2.x's documents (with num_rollout_workers=...)

    def get_rollout_fragment_length(self) -> int:
        """Steps per env per sample call, deriving "auto" from the train batch size."""
        if self.rollout_fragment_length != "auto":
            return self.rollout_fragment_length
        envs = max(self.num_env_runners, 1) * self.num_envs_per_env_runner
        return max(1, -(-self.train_batch_size // envs))
