"""``.fault_tolerance()`` (RLlib's names and meanings): what happens when a remote env runner, one
of its envs, or a learner fails."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "restart_failed_env_runners",
    "ignore_env_runner_failures",
    "max_num_env_runner_restarts",
    "delay_between_env_runner_restarts_s",
    "restart_failed_sub_environments",
    "num_consecutive_env_runner_failures_tolerance",
    "env_runner_health_probe_timeout_s",
    "env_runner_startup_timeout_s",
    "restart_failed_learners",
    "max_num_learner_restarts",
    "learner_restart_timeout_s",
)


class FaultToleranceSettings(ConfigSection):
    """``fault_tolerance()``'s settings."""

    restart_failed_env_runners: bool = True
    """Replace a remote env runner that died or timed out (its sample for that round is lost)."""
    ignore_env_runner_failures: bool = False
    """Without restarts: drop failed env runners and go on with the others."""
    max_num_env_runner_restarts: int = Field(1000, ge=0)
    """Restarts allowed over the whole run before a failure is fatal."""
    delay_between_env_runner_restarts_s: float = Field(60.0, ge=0)
    """Wait this long after a failure before starting the replacement (training goes on meanwhile)."""
    restart_failed_sub_environments: bool = False
    """Recreate an env runner's envs when one raises, instead of failing the runner."""
    num_consecutive_env_runner_failures_tolerance: int = Field(100, ge=1)
    """Failures in a row of one env runner after which training stops with an error."""
    env_runner_health_probe_timeout_s: float = Field(30.0, gt=0)
    """How long the health probe of a replacement env runner waits for it to come up before
    training goes on without it; one still starting is probed again each round (as RLlib
    re-probes unhealthy runners) until ``env_runner_startup_timeout_s``."""
    env_runner_startup_timeout_s: float = Field(600.0, gt=0)
    """How long a remote env runner has to come up (its process importing torch, building its envs
    and model), at build and after a restart, before it counts as failed. Its sampling timeouts
    start once it is up."""
    restart_failed_learners: bool = True
    """Replace the learner actors when one dies (all of them, in their bundles, from the driver's
    copy of the last update's state) and run the failed update again."""
    max_num_learner_restarts: int = Field(1000, ge=0)
    """Learner-group restarts allowed over the whole run before a dead learner is fatal."""
    learner_restart_timeout_s: float = Field(600.0, gt=0)
    """How long restarted learners have to come up (a lost node's bundle waits for a new node)."""

    def fault_tolerance(self, **kwargs: Any) -> Self:
        """What happens when a remote env runner (or one of its envs) fails."""
        return self._update("fault_tolerance", kwargs)
