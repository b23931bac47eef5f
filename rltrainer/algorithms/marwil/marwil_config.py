"""MARWIL's and BC's configs; they import no torch (the operator validates experiments with them)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import ConfigError


class MARWILConfig(AlgorithmConfig):
    """MARWIL's settings (Wang et al. 2018, "Exponentially Weighted Imitation Learning for
    Batched Historical Data"); defaults follow RLlib's MARWIL. Usually trained from recorded
    data: ``.offline_data(input_=PATH)``, with evaluation in the env."""

    ALGORITHM = "MARWIL"
    STAT_KEYS = (
        "policy_loss",
        "vf_loss",
        "total_loss",
        "vf_explained_var",
        "moving_average_sqd_adv_norm",
        "cur_lr",
    )
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + (
            "beta",
            "bc_logstd_coeff",
            "moving_average_sqd_adv_norm_update_rate",
            "moving_average_sqd_adv_norm_start",
            "vf_coeff",
            "num_epochs",
            "minibatch_size",
        ),
    }

    beta: float = Field(1.0, ge=0.0)
    """Advantage weighting: each action's log-likelihood is weighted by exp(beta * A / c), c the
    running root-mean-square advantage; 0 is behaviour cloning."""
    bc_logstd_coeff: float = Field(0.0, ge=0.0)
    """Box actions: a bonus on the policy's log standard deviation, to keep it exploring."""
    moving_average_sqd_adv_norm_update_rate: float = Field(1e-8, gt=0.0, le=1.0)
    """Update rate of the running mean of squared advantages."""
    moving_average_sqd_adv_norm_start: float = Field(100.0, gt=0.0)
    """Starting value of the running mean of squared advantages."""
    vf_coeff: float = Field(1.0, ge=0.0)
    """Weight of the value function's loss (0.5 * mean squared advantage)."""
    num_epochs: int = Field(1, ge=1)
    """Passes over each train batch."""
    minibatch_size: int | None = Field(None, ge=1)
    """Rows per gradient step (``None``: one step on the whole train batch, as RLlib's MARWIL)."""
    lr: Any = 1e-4
    train_batch_size: int = Field(2000, ge=1)

    def validate(self) -> None:
        super().validate()
        if self.minibatch_size is not None and self.minibatch_size > self.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({self.minibatch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}): lower minibatch_size or raise train_batch_size"
            )
        if self.model.use_lstm:
            raise ConfigError(
                f"{self.ALGORITHM} trains feed-forward policies: set model={{'use_lstm': False}}"
            )


class BCConfig(MARWILConfig):
    """Behaviour cloning: MARWIL with ``beta=0`` (every recorded action weighted alike, no value
    function trained), RLlib's BC."""

    ALGORITHM = "BC"
    STAT_KEYS = ("policy_loss", "total_loss", "cur_lr")

    beta: float = Field(0.0, ge=0.0, le=0.0)
    """Always 0 for BC (use MARWIL for advantage weighting)."""
