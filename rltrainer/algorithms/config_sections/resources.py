"""``.resources()``: CPUs, GPUs and custom resources for the driver, learners and env runners, and
the placement group they are reserved in."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "num_gpus",
    "num_cpus_for_main_process",
    "num_cpus_per_env_runner",
    "num_gpus_per_env_runner",
    "custom_resources_per_env_runner",
    "num_learners",
    "num_gpus_per_learner",
    "num_cpus_per_learner",
    "custom_resources_per_learner",
    "placement_strategy",
    "placement_timeout_s",
    "fake_gpus",
)

#: The per-env-runner resources RLlib's current ``env_runners()`` also sets.
ENV_RUNNER_KEYS = (
    "num_cpus_per_env_runner",
    "num_gpus_per_env_runner",
    "custom_resources_per_env_runner",
)

#: What RLlib's ``learners()`` sets (the same fields as ``resources()``'s learner settings).
LEARNER_KEYS = (
    "num_learners",
    "num_cpus_per_learner",
    "num_gpus_per_learner",
    "custom_resources_per_learner",
)


class ResourcesSettings(ConfigSection):
    """``resources()``'s settings."""

    num_gpus: float = Field(0, ge=0)
    """GPUs for the driver's local learner."""
    num_cpus_for_main_process: int = Field(1, ge=1)
    """CPUs of the driver process; also its torch threads (one is fastest for small networks)."""
    num_cpus_per_env_runner: float = Field(1, ge=0)
    """CPUs reserved for each remote env runner; also every env runner's torch threads while it
    samples (at least 1), the driver's own included (docs/design/sampling.md)."""
    num_gpus_per_env_runner: float = Field(0, ge=0)
    """GPUs reserved for each remote env runner."""
    custom_resources_per_env_runner: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each env runner requires (ties them to rollout nodes)."""
    num_learners: int = Field(0, ge=0)
    """Remote learner actors; 0 trains in the driver."""
    num_gpus_per_learner: float = Field(0, ge=0)
    """GPUs per learner (fractions allowed)."""
    num_cpus_per_learner: float = Field(1, ge=0)
    """CPUs per learner."""
    custom_resources_per_learner: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each learner requires (ties them to learner nodes)."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Strategy of the algorithm's placement group."""
    placement_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the cluster to place all bundles before failing."""
    fake_gpus: bool = False
    """RLlib's ``_fake_gpus``: the GPU settings' layout on a machine without GPUs. Nothing asks
    Ray for a GPU, learners and inference stay on the CPU, and env runners given
    ``num_gpus_per_env_runner`` act through the GPU's code path (one torch call per batch)
    instead of numpy: to test a GPU config where there is none."""

    def resources(self, **kwargs: Any) -> Self:
        """CPUs, GPUs and custom resources for learners and env runners."""
        return self._update("resources", kwargs)

    def learners(self, **kwargs: Any) -> Self:
        """RLlib's ``learners()``: how many learner actors (0 trains in the driver) and each one's
        CPUs, GPUs and custom resources (``LEARNER_KEYS``, also settable by ``resources()``)."""
        return self._update("learners", kwargs)
