"""MARWIL's loss (and BC's, its ``beta=0`` case): advantage-weighted log-likelihood of the
recorded actions, plus a value function fitted to the discounted returns.

The returns come from ``PPOLearner.build_batch`` with lambda 1: the discounted sum of the
rewards to each episode's end, bootstrapped from the value of the last observation where a
recorded piece was cut short (RLlib's MARWIL postprocessing, with the learner's values).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rltrainer.algorithms.marwil.marwil_config import MARWILConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOLearner
from rltrainer.algorithms.ppo.train_batch import PPOBatch, explained_variance
from rltrainer.core.learner import Learner
from rltrainer.env.env_runner import Rollout


class MARWILLearner(PPOLearner):
    """Gradient steps on the MARWIL (or BC) loss over each train batch."""

    STAT_KEYS = MARWILConfig.STAT_KEYS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Learner.__init__(self, *args, **kwargs)  # (PPO's adaptive KL state is not needed)
        self.recurrent = False  # the config refuses use_lstm
        # RLlib's running mean of squared advantages (it scales the exponent of the weights).
        self.ma_sqd_adv_norm = torch.tensor(
            self.config.moving_average_sqd_adv_norm_start, dtype=torch.float32, device=self.device
        )

    @property
    def cloning(self) -> bool:
        """``beta == 0``: behaviour cloning, no advantages and no value function."""
        return self.config.beta == 0

    @property
    def gae_lambda(self) -> float:
        return 1.0  # discounted returns

    @torch.no_grad()
    def build_batch(self, rollouts: list[Rollout]) -> PPOBatch:
        if not self.cloning:
            return super().build_batch(rollouts)
        columns = [(r.obs[r.valid], r.actions[r.valid]) for r in rollouts]
        obs = np.concatenate([c[0] for c in columns])
        zeros = np.zeros(len(obs), dtype=np.float32)
        return PPOBatch(obs, np.concatenate([c[1] for c in columns]), zeros, zeros, zeros, zeros)

    def update_from_batch(self, batch: PPOBatch, timestep: int) -> dict[str, float]:
        cfg = self.config
        lr = self.set_lr_for(timestep)
        data = PPOBatch(*(self.to_tensor(column) for column in batch))
        size = data.obs.shape[0]
        rows = size if cfg.minibatch_size is None else max(1, cfg.minibatch_size // self.world_size)
        stats: list[torch.Tensor] = []
        for _ in range(cfg.num_epochs):
            for mb in self.minibatches(data, size, min(rows, size)):
                loss, mb_stats = self.compute_loss(mb)
                if not self.loss_is_finite(loss, lambda mb_stats=mb_stats: self._named(mb_stats)):
                    continue
                self.apply_gradients(loss)
                stats.append(mb_stats)
        mean = self.mean_across_learners(torch.stack(stats).mean(0)).tolist() if stats else [float("nan")] * 3
        result = self._named(mean)
        result["cur_lr"] = lr
        if not self.cloning:
            result["vf_explained_var"] = explained_variance(batch.vf_preds, batch.value_targets)
            result["moving_average_sqd_adv_norm"] = float(self.ma_sqd_adv_norm)
        return result

    def _named(self, values: Any) -> dict[str, float]:
        values = values.tolist() if isinstance(values, torch.Tensor) else values
        named = {"policy_loss": values[0], "total_loss": values[2]}
        if not self.cloning:
            named["vf_loss"] = values[1]
        return named

    def compute_loss(self, mb: PPOBatch, with_stats: bool = True) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG002
        """MARWIL's loss on a minibatch (RLlib's: the weights are exp(beta * A / sqrt(m)), m the
        running mean of squared advantages); returns it and (policy, value, total) losses."""
        cfg = self.config
        dist_inputs, values = self.train_module(mb.obs)
        dist = self.dist_class(dist_inputs)
        logp = dist.log_prob(mb.actions)
        if cfg.bc_logstd_coeff > 0 and hasattr(dist, "log_std"):
            logp = logp + cfg.bc_logstd_coeff * dist.log_std.mean(-1)
        if self.cloning:
            policy_loss = -logp.mean()
            vf_loss = torch.zeros((), device=self.device)
        else:
            advantages = mb.value_targets - values
            sqd_adv_mean = advantages.pow(2).mean()
            vf_loss = 0.5 * sqd_adv_mean
            rate = cfg.moving_average_sqd_adv_norm_update_rate
            self.ma_sqd_adv_norm += rate * (sqd_adv_mean.detach() - self.ma_sqd_adv_norm)
            weights = torch.exp(cfg.beta * advantages.detach() / (1e-8 + self.ma_sqd_adv_norm.sqrt()))
            policy_loss = -(weights * logp).mean()
        loss = policy_loss + cfg.vf_coeff * vf_loss
        return loss, torch.stack([policy_loss, vf_loss, loss]).detach()

    def get_extra_state(self) -> dict[str, Any]:
        return {"moving_average_sqd_adv_norm": float(self.ma_sqd_adv_norm)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        value = state.get("moving_average_sqd_adv_norm")
        if value is not None:
            self.ma_sqd_adv_norm.fill_(float(value))
