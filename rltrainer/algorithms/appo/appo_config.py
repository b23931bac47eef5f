"""APPO's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from pydantic import Field

from rltrainer.algorithms.impala.impala_config import IMPALAConfig
from rltrainer.errors import ConfigError


class APPOConfig(IMPALAConfig):
    """APPO's settings (IMPACT, Luo et al. 2020): IMPALA's asynchronous machinery with PPO's
    clipped surrogate against a target network; defaults follow RLlib's APPO."""

    ALGORITHM = "APPO"
    STAT_KEYS = (*IMPALAConfig.STAT_KEYS, "kl", "clipfrac", "cur_kl_coeff", "num_target_updates")
    SECTIONS = {
        **IMPALAConfig.SECTIONS,
        "training": IMPALAConfig.SECTIONS["training"]
        + (
            "use_critic",
            "use_gae",
            "lambda_",
            "clip_param",
            "use_kl_loss",
            "kl_coeff",
            "kl_target",
            "target_network_update_freq",
            "tau",
        ),
    }

    vtrace: bool = True
    """V-trace advantages against the target network; ``False``: GAE advantages (``lambda_``)."""
    use_critic: bool = True
    """A value baseline (only ``True`` is supported: APPO's loss always trains one)."""
    use_gae: bool = True
    """GAE advantages when ``vtrace=False``."""
    lambda_: float = Field(1.0, ge=0.0, le=1.0)
    """GAE's lambda (``vtrace=False``); with V-trace it scales the traces."""
    clip_param: float = Field(0.4, gt=0)
    """The surrogate's clipping epsilon."""
    use_kl_loss: bool = False
    """Add ``kl_coeff`` * KL(target || current) to the loss, with an adaptive coefficient."""
    kl_coeff: float = Field(1.0, ge=0)
    """Initial KL coefficient (with ``use_kl_loss``)."""
    kl_target: float = Field(0.01, gt=0)
    """KL the coefficient steers towards."""
    target_network_update_freq: int = Field(1, ge=1)
    """Env steps trained between updates of the target network (and of the KL coefficient);
    the default updates it after every learner update, as RLlib's APPO does."""
    tau: float = Field(1.0, gt=0, le=1)
    """The target network's update: ``tau * current + (1 - tau) * target``."""
    replay_buffer_num_slots: int = Field(100, ge=0)

    def _check_vtrace(self) -> None:
        if not self.use_critic:
            raise ConfigError("APPO needs use_critic=True (its loss trains a value baseline)")
        if not self.vtrace and not self.use_gae:
            raise ConfigError("APPO without vtrace needs use_gae=True (GAE advantages)")


__all__ = ["APPOConfig"]
