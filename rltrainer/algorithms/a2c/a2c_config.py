"""A2C's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import ConfigError


class A2CConfig(AlgorithmConfig):
    """Advantage actor-critic, synchronous (Mnih et al. 2016's A3C without the asynchrony),
    RLlib's A2C: one gradient step per train batch on RLlib's A3C loss, summed over the batch's
    steps (not averaged)::

        policy_loss    = -sum(log pi(a|s) * A)
        vf_loss        = 0.5 * sum((V(s) - value_target)^2)
        policy_entropy = sum(entropy of pi(.|s))
        total_loss     = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * policy_entropy

    ``A`` and the value targets come from GAE (``use_gae``, ``lambda_``; bootstrapped from the
    value of the observation after a fragment cut or a truncation); advantages are not
    normalized. ``microbatch_size`` accumulates the gradients of microbatches of the train
    batch, then takes the one step (less memory, same step). Defaults follow RLlib's
    ``A2CConfig`` (``A3CConfig``'s, with ``num_env_runners=2`` and
    ``min_time_s_per_iteration=10``; ``train_batch_size=32`` is RLlib's common default)."""

    ALGORITHM = "A2C"
    STAT_KEYS = (
        "policy_loss",
        "vf_loss",
        "policy_entropy",
        "total_loss",
        "vf_explained_var",
        "grad_gnorm",
        "cur_lr",
        "entropy_coeff",
    )
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + ("use_critic", "use_gae", "lambda_", "vf_loss_coeff", "entropy_coeff", "microbatch_size"),
    }

    use_critic: bool = True
    """Train a value function and use it as the baseline; ``False``: the advantages are the
    discounted returns themselves (no bootstrapping; needs ``use_gae=False``)."""
    use_gae: bool = True
    """Generalized advantage estimation; ``False``: discounted returns minus the baseline."""
    lambda_: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda: 1 is Monte-Carlo advantages (bootstrapped at fragment ends), 0 one-step TD."""
    vf_loss_coeff: float = Field(0.5, ge=0.0)
    """Weight of the value loss."""
    entropy_coeff: float = Field(0.01, ge=0.0)
    """Weight of the entropy bonus."""
    microbatch_size: int | None = Field(None, ge=1)
    """Steps per forward/backward pass: gradients of the train batch's microbatches are summed,
    then one optimizer step is taken (``None``: the whole batch in one pass). With several
    learners, each takes its share of every microbatch."""
    lr: Any = 0.0001
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    grad_clip: float | None = Field(40.0, gt=0)
    """Clip gradients (see ``grad_clip_by``; the gradient of the summed loss); ``None``: no clipping."""
    train_batch_size: int = Field(32, ge=1)
    """Env steps collected per training iteration (one gradient step on all of them)."""
    num_env_runners: int = Field(2, ge=0)
    """Remote env-runner actors; 0 samples in the driver process without starting Ray."""
    min_time_s_per_iteration: float = Field(10.0, ge=0)
    """Repeat training steps within one ``train()`` until this much time passed."""

    def validate(self) -> None:
        super().validate()
        if self.microbatch_size is not None and self.microbatch_size > self.train_batch_size:
            raise ConfigError(
                f"microbatch_size ({self.microbatch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}): lower microbatch_size, raise train_batch_size, or set "
                "microbatch_size=None (the whole batch in one pass)"
            )
        if self.use_gae and not self.use_critic:
            raise ConfigError(
                "use_gae=True needs the value function (use_critic=False): set use_gae=False "
                "(discounted returns as advantages) or use_critic=True"
            )
