"""IMPALA's learner: an actor-critic loss on V-trace targets over whole trajectories."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from rltrainer.algorithms.impala.impala_config import IMPALAConfig
from rltrainer.algorithms.ppo.train_batch import explained_variance
from rltrainer.core.learner import Learner
from rltrainer.core.torch_compile import LossCoefficient
from rltrainer.env.env_runner import Rollout
from rltrainer.utils.schedules import PiecewiseSchedule
from rltrainer.utils.vtrace import vtrace


class TrajectoryBatch(NamedTuple):
    """Trajectories, env-major: ``[B, T, ...]`` per step and ``[B, ...]`` for ``last_obs``, so
    rows (shards for several learners, minibatches) are whole trajectories."""

    obs: Any
    actions: Any
    behaviour_logp: Any
    rewards: Any
    terminateds: Any
    valid: Any
    last_obs: Any


def trajectory_batch(rollouts: list[Rollout]) -> TrajectoryBatch:
    """The env runners' ``[T, N]`` rollouts side by side as ``[sum N, T]`` trajectories.

    Rollouts differ in length (a fragment holds ``rollout_fragment_length`` valid steps per env,
    plus the invalid rows between episodes): shorter ones are padded at the front with invalid
    rows, which V-trace's backward recursion never carries into the valid steps after them."""
    horizon = max(rollout.valid.shape[0] for rollout in rollouts)

    def env_major(column: str) -> np.ndarray:
        parts = []
        for rollout in rollouts:
            part = np.swapaxes(getattr(rollout, column), 0, 1)
            if part.shape[1] < horizon:
                pad = np.zeros((part.shape[0], horizon - part.shape[1], *part.shape[2:]), dtype=part.dtype)
                part = np.concatenate([pad, part], axis=1)
            parts.append(part)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    last_obs = [rollout.last_obs for rollout in rollouts]
    return TrajectoryBatch(
        obs=env_major("obs"),
        actions=env_major("actions"),
        behaviour_logp=env_major("action_logp"),
        rewards=env_major("rewards"),
        terminateds=env_major("terminateds"),
        valid=env_major("valid"),
        last_obs=last_obs[0] if len(last_obs) == 1 else np.concatenate(last_obs),
    )


def masked_mean(valid: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean over the valid steps of a ``[B, T]`` tensor."""
    weights = valid.to(torch.float32)
    count = weights.sum().clamp(min=1.0)
    return lambda x: (x * weights).sum() / count


class VTraceTerms(NamedTuple):
    """What the current network and V-trace make of a minibatch (``[B, T]`` each)."""

    dist: Any  # the current policy's distribution over the B * T steps
    logp: torch.Tensor
    values: torch.Tensor
    bootstrap_values: torch.Tensor
    valid: torch.Tensor


class IMPALALearner(Learner):
    """Policy gradient with V-trace advantages, a value loss to the V-trace targets and an
    entropy bonus (Espeholt et al. 2018, eq. 4)."""

    COMPILES_LOSS = True

    STAT_KEYS = IMPALAConfig.STAT_KEYS
    LOSS_KEYS = ("policy_loss", "vf_loss", "entropy", "total_loss", "mean_rho")
    entropy_coeff = LossCoefficient()  # scheduled (the loss reads entropy_coeff_tensor)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entropy_schedule = PiecewiseSchedule(self.config.entropy_coeff)
        self.entropy_coeff = self.entropy_schedule(0)

    def build_batch(self, rollouts: list[Rollout]) -> TrajectoryBatch:
        return trajectory_batch(rollouts)

    def update_from_batch(self, batch: TrajectoryBatch, timestep: int) -> dict[str, float]:
        cfg = self.config
        lr = self.set_lr_for(timestep)
        self.entropy_coeff = self.entropy_schedule(timestep)
        data = TrajectoryBatch(*(self.to_tensor(column) for column in batch))
        size, horizon = data.valid.shape
        if cfg.minibatch_size == "auto":
            rows = size
        else:  # whole trajectories, as many as hold about minibatch_size steps (per learner)
            rows = max(1, cfg.minibatch_size // horizon // self.world_size)
        stats: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        targets: list[torch.Tensor] = []
        for mb in self.minibatches(data, size, min(rows, size)):
            loss, mb_stats, (mb_values, mb_targets) = self.compute_loss(mb)
            if not self.loss_is_finite(loss, lambda mb_stats=mb_stats: self.named(mb_stats)):
                continue  # on_nonfinite="skip_batch"
            self.apply_gradients(loss)
            stats.append(mb_stats)
            values.append(mb_values)
            targets.append(mb_targets)
        if not stats:
            stats.append(torch.full((len(self.LOSS_KEYS),), float("nan"), device=self.device))
        result = self.named(self.mean_across_learners(torch.stack(stats).mean(0)))
        if values:
            result["vf_explained_var"] = explained_variance(
                torch.cat(values).cpu().numpy(), torch.cat(targets).cpu().numpy()
            )
        else:
            result["vf_explained_var"] = float("nan")
        result["cur_lr"] = lr
        result["curr_entropy_coeff"] = self.entropy_coeff
        self.after_update(int(data.valid.sum()), result)
        return result

    def named(self, stats: torch.Tensor) -> dict[str, float]:
        return dict(zip(self.LOSS_KEYS, stats.tolist(), strict=True))

    def after_update(self, steps: int, result: dict[str, float]) -> None:
        """Called after each update with the env steps it trained on and its stats (APPO's
        target network and KL coefficient)."""

    def forward(self, mb: TrajectoryBatch) -> VTraceTerms:
        """The current network on every step of the minibatch and on the bootstrap observations."""
        size, horizon = mb.valid.shape
        steps = size * horizon
        obs = torch.cat([mb.obs.reshape(steps, *mb.obs.shape[2:]), mb.last_obs])
        dist_inputs, all_values = self.train_module(obs)
        dist = self.dist_class(dist_inputs[:steps])
        valid = mb.valid
        logp = dist.log_prob(mb.actions.reshape(steps, *mb.actions.shape[2:])).reshape(size, horizon)
        # An invalid row's action is no real step: its log-probability may be -inf (a masked
        # action), which must not reach the loss even multiplied by 0.
        logp = torch.where(valid, logp, torch.zeros_like(logp))
        return VTraceTerms(dist, logp, all_values[:steps].reshape(size, horizon), all_values[steps:], valid)

    def discounts(self, mb: TrajectoryBatch) -> torch.Tensor:
        return self.config.gamma * (1.0 - mb.terminateds.to(torch.float32))

    def compute_loss(
        self, mb: TrajectoryBatch
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The loss, its terms (``LOSS_KEYS``), and the valid steps' values and targets."""
        cfg = self.config
        terms = self.forward(mb)
        valid = terms.valid
        log_rhos = torch.where(valid, terms.logp.detach() - mb.behaviour_logp, torch.zeros_like(terms.logp))
        vs, pg_advantages = vtrace(
            log_rhos,
            mb.rewards,
            terms.values.detach(),
            terms.bootstrap_values.detach(),
            self.discounts(mb),
            valid,
            cfg.vtrace_clip_rho_threshold,
            cfg.vtrace_clip_pg_rho_threshold,
        )
        mean = masked_mean(valid)
        policy_loss = -mean(terms.logp * pg_advantages)
        vf_loss = 0.5 * mean((vs - terms.values).pow(2))
        entropy = mean(terms.dist.entropy().reshape(valid.shape))
        loss = policy_loss + cfg.vf_loss_coeff * vf_loss - self.entropy_coeff_tensor * entropy
        with torch.no_grad():
            mean_rho = mean(log_rhos.exp())
            stats = torch.stack([policy_loss, vf_loss, entropy, loss, mean_rho]).detach()
        return loss, stats, (terms.values.detach()[valid], vs[valid])
