"""APPO's learner: PPO's clipped surrogate on V-trace (or GAE) advantages, the probability
ratio taken against a target network that trails the trained one (IMPACT, Luo et al. 2020)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from rltrainer.algorithms.appo.appo_config import APPOConfig
from rltrainer.algorithms.impala.impala_learner import IMPALALearner, TrajectoryBatch, masked_mean
from rltrainer.core.torch_compile import LossCoefficient
from rltrainer.utils.vtrace import vtrace


class APPOLearner(IMPALALearner):
    """IMPALA's learner with APPO's loss, a target network and an adaptive KL coefficient."""

    STAT_KEYS = APPOConfig.STAT_KEYS
    LOSS_KEYS = (*IMPALALearner.LOSS_KEYS, "kl", "clipfrac")
    kl_coeff = LossCoefficient()  # adapted after each update (the loss reads kl_coeff_tensor)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = copy.deepcopy(self.module).requires_grad_(False)
        self.kl_coeff = self.config.kl_coeff
        self.num_target_updates = 0
        self._steps_since_target_update = 0

    def compute_loss(
        self, mb: TrajectoryBatch
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.config
        terms = self.forward(mb)
        valid = terms.valid
        size, horizon = valid.shape
        zeros = torch.zeros_like(terms.logp)
        with torch.no_grad():  # the target ("old") policy on the same steps
            dist_inputs, _ = self.target(mb.obs.reshape(size * horizon, *mb.obs.shape[2:]))
            old_logp = self.dist_class(dist_inputs).log_prob(
                mb.actions.reshape(size * horizon, *mb.actions.shape[2:])
            )
            old_logp = torch.where(valid, old_logp.reshape(size, horizon), zeros)
        behaviour_log_rhos = torch.where(valid, old_logp - mb.behaviour_logp, zeros)
        values = terms.values.detach()
        if cfg.vtrace:
            vs, advantages = vtrace(
                behaviour_log_rhos,
                mb.rewards,
                values,
                terms.bootstrap_values.detach(),
                self.discounts(mb),
                valid,
                cfg.vtrace_clip_rho_threshold,
                cfg.vtrace_clip_pg_rho_threshold,
                lambda_=cfg.lambda_,
            )
        else:  # GAE(lambda) from the current values, no off-policy correction
            vs, _ = vtrace(
                zeros,
                mb.rewards,
                values,
                terms.bootstrap_values.detach(),
                self.discounts(mb),
                valid,
                None,
                None,
                None,
                lambda_=cfg.lambda_,
            )
            advantages = (vs - values) * valid
        mean = masked_mean(valid)
        # The behaviour policy -> target policy weight, clipped at 2 (RLlib's APPO), times the
        # target -> current ratio that the surrogate clips.
        is_ratio = behaviour_log_rhos.exp().clamp(0.0, 2.0)
        logratio = terms.logp - old_logp
        ratio = is_ratio * logratio.exp()
        surrogate = torch.minimum(
            advantages * ratio, advantages * ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param)
        )
        policy_loss = -mean(surrogate)
        vf_loss = 0.5 * mean((vs - terms.values).pow(2))
        entropy = mean(terms.dist.entropy().reshape(valid.shape))
        # KL(target || current) by the low-variance estimator (r - 1) - log r, r = current / target.
        kl = mean(logratio.exp() - 1 - logratio)
        loss = policy_loss + cfg.vf_loss_coeff * vf_loss - self.entropy_coeff_tensor * entropy
        if cfg.use_kl_loss:
            loss = loss + self.kl_coeff_tensor * kl
        with torch.no_grad():
            clipfrac = mean(((ratio - 1.0).abs() > cfg.clip_param).to(torch.float32))
            mean_rho = mean(behaviour_log_rhos.exp())
            stats = torch.stack([policy_loss, vf_loss, entropy, loss, mean_rho, kl, clipfrac]).detach()
        return loss, stats, (values[valid], vs[valid])

    def after_update(self, steps: int, result: dict[str, float]) -> None:
        """Every ``target_network_update_freq`` env steps trained: move the target network
        towards the trained one and adapt the KL coefficient (PPO's rule)."""
        self._steps_since_target_update += steps * self.world_size
        if self._steps_since_target_update >= self.config.target_network_update_freq:
            self._steps_since_target_update = 0
            self.update_target()
            kl = result["kl"]
            if self.config.use_kl_loss and kl == kl:  # not NaN
                if kl > 2.0 * self.config.kl_target:
                    self.kl_coeff *= 1.5
                elif kl < 0.5 * self.config.kl_target:
                    self.kl_coeff *= 0.5
        result["cur_kl_coeff"] = self.kl_coeff
        result["num_target_updates"] = float(self.num_target_updates)

    @torch.no_grad()
    def update_target(self) -> None:
        tau = self.config.tau
        for target, online in zip(self.target.parameters(), self.module.parameters(), strict=True):
            target.mul_(1.0 - tau).add_(online.detach(), alpha=tau)
        for target, online in zip(self.target.buffers(), self.module.buffers(), strict=True):
            target.copy_(online)
        self.num_target_updates += 1

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Restored weights are the target network's too (checkpoints store the trained one)."""
        super().set_weights(weights)
        self.target.load_state_dict(self.module.state_dict())

    def get_extra_state(self) -> dict[str, Any]:
        return {"kl_coeff": self.kl_coeff, "num_target_updates": self.num_target_updates}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))
        self.num_target_updates = int(state.get("num_target_updates", self.num_target_updates))
