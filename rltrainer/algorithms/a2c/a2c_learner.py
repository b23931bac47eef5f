"""A2C's loss and update: RLlib's A3C loss (summed over the batch's steps), one gradient step
per train batch, accumulated over ``microbatch_size`` pieces of it where that is set.

The train batch is PPO's: values from one batched forward pass, then GAE (``PPOLearner.
build_batch``; lambda 1 without ``use_gae``), bootstrapped from the value of the observation
after each fragment cut or truncation. Without the critic (``use_critic=False``) it is PG's:
discounted returns as advantages, bootstrapping nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rltrainer.algorithms.a2c.a2c_config import A2CConfig
from rltrainer.algorithms.pg.pg_learner import PGLearner
from rltrainer.algorithms.ppo.sequences import RecurrentPPOBatch
from rltrainer.algorithms.ppo.train_batch import PPOBatch, explained_variance


class A2CLearner(PGLearner):
    """Policy gradient with a learned baseline and an entropy bonus (RLlib's A3C/A2C loss)."""

    STAT_KEYS = A2CConfig.STAT_KEYS
    LOSS_TERMS = ("policy_loss", "vf_loss", "policy_entropy", "total_loss")
    REDUCTION = "sum"

    @property
    def uses_critic(self) -> bool:
        return self.config.use_critic

    @property
    def microbatch_size(self) -> int | None:
        return self.config.microbatch_size

    def compute_loss(self, mb: PPOBatch | RecurrentPPOBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """RLlib's A3C loss on ``mb`` (sums over its steps), and its terms detached:
        ``policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * policy_entropy``."""
        cfg = self.config
        dist_inputs, values, steps = self.forward_minibatch(mb)
        dist = self.dist_class(dist_inputs)
        policy_loss = -(dist.log_prob(steps.actions) * steps.advantages).sum()
        entropy = dist.entropy().sum()
        if cfg.use_critic:
            vf_loss = 0.5 * (values - steps.value_targets).pow(2).sum()
        elif self.world_size > 1:
            vf_loss = 0.0 * values.sum()  # DDP wants a gradient for every parameter: zero here
        else:
            vf_loss = torch.zeros((), device=self.device)
        total = policy_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy
        return total, torch.stack([policy_loss, vf_loss, entropy, total]).detach()

    def add_stats(self, result: dict[str, float], batch: Any) -> dict[str, float]:
        if not self.uses_critic:
            result["vf_explained_var"] = float("nan")
        elif self.recurrent:
            mask = np.asarray(batch.mask)
            result["vf_explained_var"] = explained_variance(batch.vf_preds[mask], batch.value_targets[mask])
        else:
            result["vf_explained_var"] = explained_variance(batch.vf_preds, batch.value_targets)
        result["entropy_coeff"] = self.config.entropy_coeff
        return result
