"""PG's loss and update (REINFORCE), and what A2C's learner builds on: one gradient step per
train batch, its gradient accumulated over microbatches where A2C asks for them.

The train batch is PPO's (``PPOBatch``, or ``RecurrentPPOBatch`` for an LSTM policy) with the
returns as advantages and value targets and zeros as values: ``compute_gae`` with values 0 and
lambda 1 is the discounted sum of the rewards to the end of each episode or, where the rollout
fragment cut it short (or a time limit truncated it), to the end of the fragment: RLlib's PG
bootstraps nothing there either (``last_r=0.0``).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from rltrainer.algorithms.pg.pg_config import PGConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOBatch, PPOLearner
from rltrainer.algorithms.ppo.sequences import RecurrentPPOBatch, concatenate, sequence_batch
from rltrainer.core.learner import Learner
from rltrainer.env.env_runner import Rollout
from rltrainer.utils.postprocessing import compute_gae


class PGLearner(PPOLearner):
    """One gradient step per train batch on ``-mean(logp * returns)`` (RLlib's PG loss)."""

    STAT_KEYS = PGConfig.STAT_KEYS
    #: The loss's terms, in the order ``compute_loss`` stacks them.
    LOSS_TERMS: tuple[str, ...] = ("policy_loss", "policy_entropy")
    #: How the loss reduces over steps: "mean" (PG) or "sum" (RLlib's A3C/A2C loss).
    REDUCTION = "mean"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Learner.__init__(self, *args, **kwargs)  # (PPO's adaptive KL state is not needed)
        self.recurrent = bool(getattr(self.module, "is_recurrent", False))

    @property
    def uses_critic(self) -> bool:
        """Whether the value function is trained and is the advantages' baseline."""
        return False

    @property
    def microbatch_size(self) -> int | None:
        """Steps per forward/backward pass (``None``: the whole batch at once)."""
        return None

    # --- the train batch ----------------------------------------------------------------
    @torch.no_grad()
    def build_batch(self, rollouts: list[Rollout]) -> PPOBatch | RecurrentPPOBatch:
        if self.uses_critic:
            return super().build_batch(rollouts)  # values, then GAE
        parts = []
        for rollout in rollouts:
            returns = discounted_returns(rollout, self.config.gamma)
            if self.recurrent:
                parts.append(sequence_batch(rollout, returns, returns, self.config.model.max_seq_len))
                continue
            valid = rollout.valid
            zeros = np.zeros(int(valid.sum()), dtype=np.float32)
            parts.append(
                PPOBatch(
                    rollout.obs[valid],
                    rollout.actions[valid],
                    rollout.action_logp[valid],
                    zeros,
                    returns[valid],
                    returns[valid],
                )
            )
        if self.recurrent:
            return concatenate(parts)
        if len(parts) == 1:
            return parts[0]
        return PPOBatch(*(np.concatenate(column) for column in zip(*parts, strict=True)))

    # --- the update -----------------------------------------------------------------------
    def update_from_batch(self, batch: PPOBatch | RecurrentPPOBatch, timestep: int) -> dict[str, float]:
        lr = self.set_lr_for(timestep)
        data = type(batch)(*(None if column is None else self.to_tensor(column) for column in batch))
        size = data.obs.shape[0]  # steps (sequences for an LSTM policy)
        stats = self._step(data, size) if size else None  # none: every fragment dropped (skip_batch)
        result = dict.fromkeys((*self.LOSS_TERMS, "grad_gnorm"), float("nan")) if stats is None else stats
        result["cur_lr"] = lr
        return self.add_stats(result, batch)

    def add_stats(self, result: dict[str, float], batch: Any) -> dict[str, float]:  # noqa: ARG002
        """The algorithm's further statistics (A2C: the value function's)."""
        return result

    def _step(self, data: Any, size: int) -> dict[str, float] | None:
        """Gradients of the loss over the batch, accumulated microbatch by microbatch, then one
        optimizer step; the loss terms (``None`` when a non-finite loss skipped the step)."""
        rows = size
        if self.microbatch_size is not None:  # per synchronized step: each learner takes its share
            rows = max(1, self.microbatch_size // self.world_size)
            if self.recurrent:  # whole sequences, as many as hold about that many steps
                rows = max(1, round(rows * size / max(1, int(data.mask.sum()))))
        chunks = [
            type(data)(*(None if column is None else column[start : start + rows] for column in data))
            for start in range(0, size, rows)
        ]
        steps = float(data.mask.sum()) if self.recurrent else float(size)
        # A mean over the batch is the mean of its learners' equal shards, which DDP's gradient
        # averaging gives; a sum over the batch is world_size times that average.
        scale = float(self.world_size) if self.REDUCTION == "sum" else 1.0
        self.flat_params.zero_grad()
        terms: list[torch.Tensor] = []
        for i, chunk in enumerate(chunks):
            # Only the last pass all-reduces (DDP): the others accumulate locally.
            last = i == len(chunks) - 1
            sync = nullcontext() if last or self.world_size == 1 else self.train_module.no_sync()
            with sync:
                chunk_steps = float(chunk.mask.sum()) if self.recurrent else len(chunk.obs)
                weight = 1.0 if self.REDUCTION == "sum" else chunk_steps / steps
                loss, chunk_terms = self.compute_loss(chunk)
                if not self.loss_is_finite(loss, lambda t=chunk_terms: self._named(t)):
                    self.flat_params.zero_grad()
                    return None  # on_nonfinite="skip_batch": no step on this batch
                (loss * (weight * scale)).backward()
            terms.append(chunk_terms * weight)
        grad_norm = self.flat_params.grad.norm()
        if self.config.grad_clip is not None:
            self.flat_params.clip_grad(self.config.grad_clip, self.config.grad_clip_by)
        self.optimizer.step()
        # The loss terms of the whole batch: summed (or averaged) over microbatches and learners.
        total = self.mean_across_learners(torch.stack(terms).sum(0))
        if self.REDUCTION == "sum":
            total = total * self.world_size
        result = self._named(total)
        result["grad_gnorm"] = float(grad_norm)
        return result

    def _named(self, terms: torch.Tensor) -> dict[str, float]:
        return dict(zip(self.LOSS_TERMS, terms.tolist(), strict=True))

    def compute_loss(self, mb: PPOBatch | RecurrentPPOBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """RLlib's PG loss ``-mean(logp * returns)`` on ``mb``, and its terms (policy loss,
        mean entropy) detached."""
        dist_inputs, values, steps = self.forward_minibatch(mb)
        dist = self.dist_class(dist_inputs)
        policy_loss = -(dist.log_prob(steps.actions) * steps.advantages).mean()
        loss = policy_loss
        if self.world_size > 1:
            # DDP wants a gradient for every parameter: the unused value head's is zero.
            loss = loss + 0.0 * values.sum()
        with torch.no_grad():
            terms = torch.stack([policy_loss, dist.entropy().mean()])
        return loss, terms

    @torch.no_grad()
    def loss_terms(self, mb: PPOBatch) -> dict[str, float]:
        return self._named(self.compute_loss(mb)[1])

    def get_extra_state(self) -> dict[str, Any]:
        return {}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        pass


def discounted_returns(rollout: Rollout, gamma: float) -> np.ndarray:
    """``[T, N]`` discounted sums of the rewards from each step to its episode's end, or to the
    fragment's end where the episode goes on (bootstrapping 0 there, and after a truncation)."""
    zeros = np.zeros(rollout.rewards.shape, dtype=np.float32)
    dones = (rollout.terminateds | rollout.truncateds).astype(np.float32)
    returns, _ = compute_gae(
        rewards=rollout.rewards,
        values=zeros,
        terminateds=dones,
        dones=dones,
        last_values=zeros[0],
        gamma=gamma,
        lambda_=1.0,
    )
    return returns
