"""PPO's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import ConfigError


class PPOConfig(AlgorithmConfig):
    """PPO's settings; defaults follow RLlib's PPO."""

    ALGORITHM = "PPO"
    SUPPORTS_MULTI_AGENT = True
    STAT_KEYS = (
        "policy_loss",
        "vf_loss",
        "entropy",
        "kl",
        "clipfrac",
        "vf_explained_var",
        "total_loss",
        "cur_lr",
        "cur_kl_coeff",
    )
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + (
            "lambda_",
            "clip_param",
            "vf_clip_param",
            "vf_loss_coeff",
            "entropy_coeff",
            "kl_coeff",
            "kl_target",
            "num_epochs",
            "minibatch_size",
            "use_gae",
        ),
    }

    lambda_: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda: 1 is Monte-Carlo advantages, 0 one-step TD."""
    clip_param: float = Field(0.3, gt=0)
    """PPO's surrogate clipping epsilon."""
    vf_clip_param: float | None = Field(10.0, gt=0)
    """Each squared value error is clipped at this (RLlib's meaning: keep it above the squared
    scale of returns, or ``None`` for no clipping)."""
    vf_loss_coeff: float = Field(1.0, ge=0)
    """Weight of the value loss."""
    entropy_coeff: float = Field(0.0, ge=0)
    """Weight of the entropy bonus."""
    kl_coeff: float = Field(0.2, ge=0)
    """Initial coefficient of the adaptive KL penalty (0 disables it)."""
    kl_target: float = Field(0.01, gt=0)
    """KL the adaptive coefficient steers towards."""
    num_epochs: int = Field(30, ge=1)
    """Passes of minibatch SGD over each train batch."""
    minibatch_size: int = Field(128, ge=1)
    """Samples per gradient step."""
    use_gae: bool = True
    """Generalized advantage estimation; ``False`` uses Monte-Carlo returns minus the baseline."""

    def validate(self) -> None:
        super().validate()
        if self.minibatch_size > self.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({self.minibatch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}): lower minibatch_size or raise train_batch_size"
            )
