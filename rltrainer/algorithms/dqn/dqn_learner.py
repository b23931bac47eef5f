"""DQN's module and loss: (double) Q-learning on replayed n-step transitions, target network."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from rltrainer.algorithms.dqn.dqn_config import DQNConfig
from rltrainer.core.learner import Learner
from rltrainer.core.models import QNetwork, TargetCopy, input_dict_rows
from rltrainer.utils.replay_buffers import ReplayBatch


class DQNModule(nn.Module):
    """The online Q-network ``q`` and its target copy ``target`` (not trained by gradients):
    ``make_q()`` (a ``QNetwork``, over an MLP, a conv stack or a custom model)
    or, without it, ``QNetwork(**q_kwargs)``."""

    def __init__(self, make_q: Any = None, **q_kwargs: Any) -> None:
        super().__init__()
        make_q = make_q or (lambda: QNetwork(**q_kwargs))
        self.q = make_q()
        self.target = make_q()
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)

    def forward(self, obs: Any, state: Any = None, seq_lens: Any = None) -> Any:  # noqa: ARG002
        """Q-values of the online network for flat rows. RLlib's call ``model({"obs": rows})``
        returns ``(features, state)`` for ``get_q_value_distributions`` and ``get_state_value``."""
        if isinstance(obs, dict):
            return self.q.features(input_dict_rows(self, obs)), list(state or [])
        return self.q(obs)

    def get_q_value_distributions(self, model_out: torch.Tensor) -> list[torch.Tensor]:
        """RLlib's ``[action_scores, logits, probs_or_logits]``: here the Q-values ``[B, n]``
        three times (no distributional DQN), from ``model({"obs": ...})``'s features."""
        q_values = self.q.q_values(model_out)
        return [q_values, q_values, q_values]

    def get_state_value(self, model_out: torch.Tensor) -> torch.Tensor:
        """``V(s)`` ``[B, 1]`` from the features: the dueling value head, else ``max_a Q``."""
        return self.q.state_value(model_out).unsqueeze(-1)

    def numpy_policy(self):
        return self.q.numpy_policy()


class DQNLearner(Learner):
    """One gradient step per replayed batch (Mnih et al. 2015; van Hasselt et al. 2016)."""

    STAT_KEYS = DQNConfig.STAT_KEYS  # declared with the config: stop criteria are checked without torch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = TargetCopy(self.module.target)
        self.last_target_update = 0  # env steps sampled at the last target update
        self.last_td_errors = np.zeros(0, dtype=np.float32)

    def build_batch(self, batch: ReplayBatch) -> ReplayBatch:
        return batch  # replayed batches are already flat transitions

    def update_from_batch(self, batch: ReplayBatch, timestep: int) -> dict[str, float]:
        lr = self.set_lr_for(timestep)
        loss, td_error, q_taken = self.compute_loss(batch)
        terms = lambda: {"td_loss": float(loss), "q_taken_mean": float(q_taken.mean())}  # noqa: E731
        if self.loss_is_finite(loss, terms):
            self.apply_gradients(loss)
        else:  # skipped (on_nonfinite="skip_batch"): no NaN priorities for the replay buffer
            td_error = torch.nan_to_num(td_error, nan=0.0, posinf=0.0, neginf=0.0)
        if timestep - self.last_target_update >= self.config.target_network_update_freq:
            self.target.update(self.flat_params.data, self.config.tau)
            self.last_target_update = timestep
        stats = torch.stack([loss.detach(), q_taken.detach().mean()])
        if self.world_size > 1:
            stats = self.mean_across_learners(stats)
        qf_loss, qf_mean = stats.tolist()
        self.last_td_errors = td_error.detach().cpu().numpy()
        td_abs = float(np.abs(self.last_td_errors).mean())
        return {"qf_loss": qf_loss, "qf_mean": qf_mean, "td_error_abs_mean": td_abs, "cur_lr": lr}

    def compute_loss(self, b: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, td_error, Q(s, a))`` for one replayed (numpy) batch."""
        cfg = self.config
        size = len(b.rewards)
        # Per-sample arithmetic on 64 numbers is cheaper in numpy than as torch ops.
        bootstrap = self.to_tensor(b.discounts * (1.0 - b.terminateds))  # gamma^k, 0 after a termination
        rewards, weights = self.to_tensor(b.rewards), self.to_tensor(b.weights)
        actions = self.to_tensor(b.actions.astype(np.int64)[:, None])
        # One forward pass over s and s' (double Q needs the online net's argmax at s').
        obs = self.to_tensor(np.concatenate([b.obs, b.next_obs]) if cfg.double_q else b.obs)
        q_all = self.train_module(obs)
        q_taken = q_all[:size].gather(1, actions).squeeze(1)
        with torch.no_grad():
            q_target_next = self.module.target(obs[size:] if cfg.double_q else self.to_tensor(b.next_obs))
            if cfg.double_q:  # action chosen by the online net, valued by the target net
                q_next = q_target_next.gather(1, q_all[size:].argmax(1, keepdim=True)).squeeze(1)
            else:
                q_next = q_target_next.max(1).values
            # n-step target: sum_j gamma^j r_{t+j} + gamma^k (1 - terminated) max_a Q'(s_{t+k}, a)
            q_target = rewards + bootstrap * q_next
        td_error = q_taken - q_target
        if cfg.td_error_loss_fn == "huber":  # Huber with delta 1 (Mnih et al. 2015's error clipping)
            per_sample = functional.huber_loss(q_taken, q_target, reduction="none", delta=1.0)
        else:
            per_sample = 0.5 * td_error.pow(2)
        loss = (weights * per_sample).mean()  # importance weights correct prioritized sampling
        return loss, td_error, q_taken

    def get_policy_weights(self) -> dict[str, torch.Tensor]:
        """Only what env runners act with: the online network."""
        return {f"q.{k}": v.detach().cpu().clone() for k, v in self.module.q.state_dict().items()}

    def get_extra_state(self) -> dict[str, Any]:
        return {"last_target_update": self.last_target_update}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
