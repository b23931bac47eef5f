"""PPO's loss and update: clipped surrogate, clipped value loss, entropy bonus, adaptive KL."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
import torch

from rltrainer.algorithms.ppo import manual_gradients
from rltrainer.algorithms.ppo.ppo_config import PPOConfig
from rltrainer.algorithms.ppo.sequences import RecurrentPPOBatch, concatenate, sequence_batch
from rltrainer.algorithms.ppo.train_batch import PPOBatch, explained_variance
from rltrainer.core.learner import Learner
from rltrainer.core.torch_compile import LossCoefficient
from rltrainer.env.env_runner import Rollout
from rltrainer.utils.postprocessing import compute_gae


class PPOLearner(Learner):
    """Minibatch SGD over several epochs of one sampled batch (Schulman et al. 2017)."""

    COMPILES_LOSS = True
    kl_coeff = LossCoefficient()  # adapted after each update (the loss reads kl_coeff_tensor)

    STAT_KEYS = PPOConfig.STAT_KEYS  # declared with the config: stop criteria are checked without torch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kl_coeff = self.config.kl_coeff
        # An LSTM policy learns from sequences (RecurrentPPOBatch), minibatched by sequence.
        self.recurrent = bool(getattr(self.module, "is_recurrent", False))

    def update_from_batch(self, batch: PPOBatch | RecurrentPPOBatch, timestep: int) -> dict[str, float]:
        cfg = self.config
        lr = self.set_lr_for(timestep)
        data = type(batch)(*(None if column is None else self.to_tensor(column) for column in batch))
        # Advantage normalization over the whole batch (RLlib; SB3 does it per minibatch).
        advantages = data.advantages
        valid = advantages if not self.recurrent else advantages[data.mask]
        # (One valid step has no spread: a multi-agent policy whose agents acted once in a fragment.)
        spread = valid.std() if valid.numel() > 1 else torch.zeros((), device=valid.device)
        data = data._replace(advantages=(advantages - valid.mean()) / (spread + 1e-8))
        size = data.obs.shape[0]  # steps (sequences for an LSTM policy)
        if size == 0:  # every fragment dropped (on_nonfinite="skip_batch"): nothing to learn from
            nan = float("nan")
            stats = dict.fromkeys(("policy_loss", "vf_loss", "entropy", "kl", "clipfrac", "total_loss"), nan)
            return {**stats, "vf_explained_var": nan, "cur_lr": lr, "cur_kl_coeff": self.kl_coeff}
        # minibatch_size is per synchronized step: each of the learners takes its share. A
        # minibatch as large as the train batch means full-batch steps over whatever was sampled.
        full_batch = cfg.minibatch_size >= cfg.train_batch_size
        rows = cfg.minibatch_size // self.world_size
        if self.recurrent:  # whole sequences, as many as hold about that many steps
            rows = round(rows * size / max(1, int(data.mask.sum())))
        minibatch = size if full_batch else min(max(1, rows), size)
        stats: list[torch.Tensor] = []
        # The plain actor-critic MLP's gradients are written out (bitwise autograd's, faster).
        by_hand = self.gradients_by_hand()
        for epoch in range(cfg.num_epochs):
            # Diagnostics cost as much as the loss itself, so only the last epoch reports them.
            last_epoch = epoch == cfg.num_epochs - 1
            for mb in self.minibatches(data, size, minibatch):
                if by_hand:
                    loss, mb_stats = manual_gradients.loss_and_gradients(self, mb, last_epoch)
                else:
                    loss, mb_stats = self.compute_loss(mb, last_epoch)
                if not self.loss_is_finite(loss, lambda mb=mb: self.loss_terms(mb)):
                    continue  # on_nonfinite="skip_batch"
                if by_hand:
                    self.step_with_gradients()
                else:
                    self.apply_gradients(loss)
                if last_epoch:
                    stats.append(mb_stats)
        if not stats:  # every step of the last epoch skipped
            stats.append(torch.full((6,), float("nan"), device=self.device))
        mean = self.mean_across_learners(torch.stack(stats).mean(0)).tolist()
        result = dict(
            zip(("policy_loss", "vf_loss", "entropy", "kl", "clipfrac", "total_loss"), mean, strict=True)
        )
        self._adapt_kl_coeff(result["kl"])
        if self.recurrent:
            mask = batch.mask
            result["vf_explained_var"] = explained_variance(batch.vf_preds[mask], batch.value_targets[mask])
        else:
            result["vf_explained_var"] = explained_variance(batch.vf_preds, batch.value_targets)
        result["cur_lr"] = lr
        result["cur_kl_coeff"] = self.kl_coeff
        return result

    def gradients_by_hand(self) -> bool:
        """Whether ``manual_gradients`` gives this update's loss and gradients: PPO's own loss
        and backward pass (not a subclass's) on a network and settings it writes out."""
        cls = type(self)
        return (
            cls.compute_loss is PPOLearner.compute_loss
            and cls.forward_minibatch is PPOLearner.forward_minibatch
            and cls.apply_gradients is Learner.apply_gradients
            and manual_gradients.applies(self)
        )

    def stack_key(self) -> Hashable | None:
        # Policies of one architecture update together (multi-agent only: imported on first use);
        # a subclass may change the loss, so it updates alone.
        if type(self) is not PPOLearner:
            return None
        from rltrainer.algorithms.ppo import stacked_update

        return stacked_update.stack_key(self)

    @staticmethod
    def update_stacked(
        learners: list[PPOLearner], rollouts: list[list[Rollout]], timestep: int
    ) -> list[dict[str, float]]:
        from rltrainer.algorithms.ppo import stacked_update

        return stacked_update.update_stacked(learners, rollouts, timestep)

    @property
    def gae_lambda(self) -> float:
        """GAE's lambda (1 without ``use_gae``: discounted returns minus the baseline)."""
        return self.config.lambda_ if self.config.use_gae else 1.0

    @torch.no_grad()
    def build_batch(self, rollouts: list[Rollout]) -> PPOBatch | RecurrentPPOBatch:
        """Values of every observation in one batched forward pass, GAE, then valid steps flattened.

        An LSTM policy's values come from the sampler (they depend on the state), and its batch
        is sequences (``rltrainer.algorithms.ppo.sequences``)."""
        if self.recurrent:
            return self._build_sequences(rollouts)
        parts = []
        for rollout in rollouts:
            horizon, num_envs = rollout.valid.shape
            all_obs = np.concatenate([rollout.obs.reshape(horizon * num_envs, -1), rollout.last_obs])
            values = self.values_of(all_obs)
            vf_preds = values[: horizon * num_envs].reshape(horizon, num_envs)
            advantages, value_targets = compute_gae(
                rewards=rollout.rewards,
                values=vf_preds,
                terminateds=rollout.terminateds.astype(np.float32),
                dones=(rollout.terminateds | rollout.truncateds).astype(np.float32),
                last_values=values[horizon * num_envs :],
                gamma=self.config.gamma,
                lambda_=self.gae_lambda,
            )
            valid = rollout.valid
            parts.append(
                PPOBatch(
                    rollout.obs[valid],
                    rollout.actions[valid],
                    rollout.action_logp[valid],
                    vf_preds[valid],
                    advantages[valid],
                    value_targets[valid],
                )
            )
        if len(parts) == 1:
            return parts[0]
        return PPOBatch(*(np.concatenate(column) for column in zip(*parts, strict=True)))

    def values_of(self, rows: np.ndarray) -> np.ndarray:
        """State values of ``[N, obs_size]`` rows, in chunks of about 4M observation values (256
        rows of 84x84x4 frames; one chunk for small observations): the conv stack's
        activations then stay in the CPU's caches, a fifth faster than one pass over 1,024
        frames."""
        chunk = max(256, (1 << 22) // max(1, rows.shape[1]))
        tensor = self.to_tensor(rows)
        if len(rows) <= chunk:
            return self.module.values(tensor).cpu().numpy()
        return torch.cat([self.module.values(part) for part in tensor.split(chunk)]).cpu().numpy()

    def _build_sequences(self, rollouts: list[Rollout]) -> RecurrentPPOBatch:
        parts = []
        for rollout in rollouts:
            rec = rollout.recurrent
            advantages, value_targets = compute_gae(
                rewards=rollout.rewards,
                values=rec.vf_preds,
                terminateds=rollout.terminateds.astype(np.float32),
                dones=(rollout.terminateds | rollout.truncateds).astype(np.float32),
                last_values=rec.last_vf_preds,
                gamma=self.config.gamma,
                lambda_=self.gae_lambda,
            )
            parts.append(sequence_batch(rollout, advantages, value_targets, self.config.model.max_seq_len))
        return concatenate(parts)

    def forward_minibatch(
        self, mb: PPOBatch | RecurrentPPOBatch
    ) -> tuple[torch.Tensor, torch.Tensor, PPOBatch]:
        """``(dist_inputs, values, steps)`` of a minibatch's steps, one row each (for an LSTM
        policy: its sequences replayed, then the valid steps taken out)."""
        if not self.recurrent:
            dist_inputs, values = self.train_module(mb.obs)
            return dist_inputs, values, mb
        dist_inputs, values = self.train_module(
            mb.obs,
            mb.state_in,
            None,
            mb.prev_actions,
            mb.prev_rewards,  # no resets inside (split)
        )
        mask = mb.mask
        steps = PPOBatch(*(column[mask] for column in mb[: len(PPOBatch._fields)]))
        return dist_inputs[mask], values[mask], steps

    def compute_loss(
        self, mb: PPOBatch | RecurrentPPOBatch, with_stats: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The PPO objective on one minibatch, in the paper's notation; optionally its diagnostics."""
        cfg = self.config
        dist_inputs, values, mb = self.forward_minibatch(mb)
        dist = self.dist_class(dist_inputs)
        logratio = dist.log_prob(mb.actions) - mb.action_logp
        ratio = logratio.exp()

        # Clipped surrogate objective L^CLIP (PPO paper, eq. 7), negated into a loss.
        surr1 = ratio * mb.advantages
        surr2 = torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param) * mb.advantages
        pg_loss = -torch.min(surr1, surr2).mean()

        # Value loss; RLlib's vf_clip_param clips each squared error (None: no clipping).
        vf_loss = (values - mb.value_targets).pow(2)
        if cfg.vf_clip_param is not None:
            vf_loss = torch.clamp(vf_loss, max=cfg.vf_clip_param)
        vf_loss = vf_loss.mean()
        loss = pg_loss + cfg.vf_loss_coeff * vf_loss

        if cfg.entropy_coeff > 0:
            loss = loss - cfg.entropy_coeff * dist.entropy().mean()
        if cfg.kl_coeff > 0:  # (adapting never brings a positive coefficient to 0)
            # KL(old || new) by the low-variance estimator (ratio - 1) - log(ratio) (Schulman 2020).
            loss = loss + self.kl_coeff_tensor * ((ratio - 1) - logratio).mean()
        if not with_stats:
            return loss, None
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
            stats = torch.stack([pg_loss, vf_loss, dist.entropy().mean(), approx_kl, clipfrac, loss])
        return loss, stats

    @torch.no_grad()
    def loss_terms(self, mb: PPOBatch) -> dict[str, float]:
        """The loss's terms on ``mb``, by name (for a message about a non-finite loss)."""
        _, stats = self.compute_loss(mb, with_stats=True)
        names = ("policy_loss", "vf_loss", "entropy", "kl")
        return dict(zip(names, stats[:4].tolist(), strict=True))

    def _adapt_kl_coeff(self, kl: float) -> None:
        # Adaptive KL penalty (PPO paper, section 4), with RLlib's factors 1.5 and 0.5.
        if self.kl_coeff <= 0:
            return
        if kl > 2.0 * self.config.kl_target:
            self.kl_coeff *= 1.5
        elif kl < 0.5 * self.config.kl_target:
            self.kl_coeff *= 0.5

    def get_extra_state(self) -> dict[str, Any]:
        return {"kl_coeff": self.kl_coeff}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))
