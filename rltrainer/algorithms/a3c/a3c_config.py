"""A3C's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rltrainer.algorithms.a2c.a2c_config import A2CConfig
from rltrainer.errors import ConfigError


class A3CConfig(A2CConfig):
    """A3C's settings (Mnih et al. 2016); defaults follow RLlib's A3C: A2C's loss, with each env
    runner computing the gradient of its own fragments and the driver applying them as they
    arrive."""

    ALGORITHM = "A3C"
    STAT_KEYS = (*A2CConfig.STAT_KEYS, "num_gradient_updates", "gradient_lag_updates")

    rollout_fragment_length: Any = 10
    min_time_s_per_iteration: float = Field(5.0, ge=0)

    def validate(self) -> None:
        super().validate()
        if self.microbatch_size is not None:
            raise ConfigError(
                "microbatch_size: A3C's env runners compute each gradient on their own fragment in "
                "one pass; set microbatch_size=None (or use A2C)"
            )
        if self.num_learners > 0:
            raise ConfigError("A3C applies the env runners' gradients in the driver: set num_learners=0")


__all__ = ["A3CConfig"]
