"""CQL's losses (Kumar et al. 2020, CQL(H), as RLlib's ``cql_torch_policy``): SAC's, with a
conservative penalty on the critics and behaviour cloning of the actor at first.

Per replayed batch:

- critics: the Bellman loss (``mean(w (Q(s, a) - y)^2)``, RLlib's MSE with a prioritized buffer's
  weights ``w``, ``y = r + gamma^n min Q'(s', a')``
  without the entropy term under ``deterministic_backup``) plus, per critic,
  ``min_q_weight * (temperature * mean_s logsumexp_j(x_j / temperature) - mean_s Q(s, a_data))``,
  the ``x_j`` being ``num_actions`` each of ``Q(s, a_unif) - log(2^-d)``, ``Q(s, a_pi(s)) - log pi``
  and ``Q(s, a_pi(s')) - log pi(.|s')`` (importance-weighted samples of the log-sum-exp over all
  actions); with ``lagrangian``, ``alpha_prime * (penalty - lagrangian_thresh)`` instead;
- ``alpha_prime`` (``lagrangian`` only): ``-alpha_prime * mean_i(penalty_i - lagrangian_thresh)``;
- actor: ``alpha log pi(a~|s) - log pi(a_data|s)`` for the first ``bc_iters`` gradient steps,
  SAC's ``alpha log pi(a~|s) - min Q(s, a~)`` after;
- temperature and targets: SAC's.

The uniform actions are drawn over [-1, 1]^d, where the squashed policy acts and the replayed
actions are stored (normalized; RLlib's old stack draws them over the env's bounds instead).
Steps in order: critics, alpha_prime, actor (on the critics just stepped, as our SAC, SB3 and
Spinning Up do), temperature. RLlib's old stack steps temperature, actor, critics, alpha_prime;
its new stack applies every part's gradients from one forward pass. The orders differ by one
optimizer step's worth, and not at all for the behaviour-cloning actor loss.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rltrainer.algorithms.cql.cql_config import CQLConfig
from rltrainer.algorithms.sac.sac_learner import SACLearner, SACModule
from rltrainer.core.actor_critic_learner import ParameterModule, min_q
from rltrainer.utils.replay_buffers import ReplayBatch

ALPHA_PRIME_MAX = 1e6  # RLlib's clamp of exp(log alpha_prime)


class CQLLearner(SACLearner):
    """SAC's learner with CQL(H)'s critic penalty, behaviour-cloning warm-up and (optionally)
    the Lagrangian ``alpha_prime``; see the module docstring for the losses."""

    STAT_KEYS = CQLConfig.STAT_KEYS

    def __init__(self, module: SACModule, dist_class: type, config: Any, device: str = "cpu") -> None:
        super().__init__(module, dist_class, config, device)
        self.gradient_steps = 0  # updates taken; bc_iters counts these (RLlib's policy.cur_iter)
        # log of the uniform density over [-1, 1]^d that the random actions are drawn from
        self.random_log_density = -self._action_dims() * math.log(2.0)

    def optimizer_parts(self) -> dict[str, tuple[nn.Module, float]]:
        parts = super().optimizer_parts()
        if self.config.lagrangian:  # RLlib: its own Adam at the critic's learning rate
            parts["alpha_prime"] = (
                ParameterModule(self.module.log_alpha_prime),
                self.config.optimization_config["critic_learning_rate"],
            )
        return parts

    def alpha_prime(self) -> torch.Tensor:
        """The penalty's Lagrange multiplier (``lagrangian=True``), clamped as in RLlib."""
        return self.module.log_alpha_prime.exp().clamp(0.0, ALPHA_PRIME_MAX)

    def update_from_batch(self, batch: ReplayBatch, timestep: int) -> dict[str, float]:
        cfg, m, b = self.config, self.module, batch
        obs, next_obs = self.to_tensor(b.obs), self.to_tensor(b.next_obs)
        actions = self.to_tensor(b.actions)
        rewards, weights = self.to_tensor(b.rewards), self.to_tensor(b.weights)
        bootstrap = self.to_tensor(b.discounts * (1.0 - b.terminateds))  # gamma^k, 0 after a termination
        alpha = m.log_alpha.detach().exp()

        pi_inputs = m.pi(obs)  # the actor's loss below backpropagates through these
        with torch.no_grad():
            next_inputs = m.pi(next_obs)
            next_actions, next_logp = self.dist_class(next_inputs).rsample_with_logp()
            v_next = min_q(m.target_critics(), next_obs, next_actions)
            if not cfg.deterministic_backup:
                v_next = v_next - alpha * next_logp
            q_target = rewards + bootstrap * v_next
            sampled, offsets = self.sample_penalty_actions(pi_inputs.detach(), next_inputs)

        # --- critics: Bellman loss + conservative penalty
        pairs = [self.penalized_q(q, obs, actions, sampled, offsets) for q in m.critics()]
        q_values, penalties = [q for q, _ in pairs], [p for _, p in pairs]
        bellman = sum((weights * (q - q_target).pow(2)).mean() for q in q_values)
        if cfg.lagrangian:
            alpha_prime = self.alpha_prime()
            cql_terms = [alpha_prime.detach() * (p - cfg.lagrangian_thresh) for p in penalties]
        else:
            cql_terms = penalties
        cql_loss = sum(cql_terms)
        critic_loss = bellman + cql_loss
        self.step("critic", critic_loss)

        # --- alpha_prime: grows while the penalty is above lagrangian_thresh
        if cfg.lagrangian:
            gap = torch.stack([p.detach() for p in penalties]).mean() - cfg.lagrangian_thresh
            self.step("alpha_prime", -alpha_prime * gap)

        # --- actor
        actor_loss, logp = self.actor_loss(pi_inputs, obs, actions, alpha)
        self.step("actor", actor_loss, inputs=self.actor_params.params)
        entropy = -logp.detach()

        # --- temperature: SAC's
        alpha_loss = m.log_alpha * (entropy - self.target_entropy).mean()
        self.step("alpha", alpha_loss)

        self.gradient_steps += 1
        self._update_targets(timestep)
        self.set_td_errors(q_values[0] - q_target)
        values = [critic_loss, actor_loss, alpha_loss, alpha, q_values[0].mean(), entropy.mean()]
        values.append(cql_loss / len(cql_terms))  # per critic, as added to its loss
        if cfg.lagrangian:
            values.append(alpha_prime)
        stats = torch.stack([v.detach() for v in values]).tolist()
        return dict(zip(self.STAT_KEYS, stats, strict=False))

    def actor_loss(
        self, pi_inputs: torch.Tensor, obs: torch.Tensor, actions: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, log pi(a~|s))``: behaviour cloning, ``alpha log pi(a~|s) - log pi(a_data|s)``,
        for the first ``bc_iters`` gradient steps, then SAC's ``alpha log pi(a~|s) - min Q(s, a~)``."""
        dist = self.dist_class(pi_inputs)
        new_actions, logp = dist.rsample_with_logp()
        if self.gradient_steps < self.config.bc_iters:
            return (alpha * logp - dist.log_prob(actions)).mean(), logp
        return (alpha * logp - min_q(self.module.critics(), obs, new_actions)).mean(), logp

    def penalized_q(
        self,
        q: nn.Module,
        obs: torch.Tensor,
        actions: torch.Tensor,
        sampled: torch.Tensor,
        offsets: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q(s, a_data) [B], penalty)`` of critic ``q``: ``min_q_weight * (temperature *
        mean_s logsumexp_j((Q(s, sampled_j) - offsets_j) / temperature) - mean_s Q(s, a_data))``,
        from one forward over the data actions and the sampled ones (``[B, K, d]``)."""
        cfg = self.config
        n, size = sampled.shape[:2]
        obs_all = torch.cat([obs, obs.repeat_interleave(size, dim=0)])
        q_all = q(obs_all, torch.cat([actions, sampled.reshape(n * size, -1)]))
        q_data, q_sampled = q_all[:n], q_all[n:].view(n, size)
        logsumexp = torch.logsumexp((q_sampled - offsets) / cfg.temperature, dim=1)
        return q_data, cfg.min_q_weight * (cfg.temperature * logsumexp.mean() - q_data.mean())

    def sample_penalty_actions(
        self, pi_inputs: torch.Tensor, next_inputs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, 3 * num_actions, d]`` actions per state (uniform, pi(s), pi(s')) and the log
        densities they were drawn with ``[B, 3 * num_actions]`` (subtracted from their Q)."""
        k = self.config.num_actions
        n, width = pi_inputs.shape
        uniform = torch.rand(n, k, width // 2, device=pi_inputs.device) * 2.0 - 1.0
        current, current_logp = self.dist_class(pi_inputs[:, None].expand(n, k, width)).rsample_with_logp()
        following, following_logp = self.dist_class(
            next_inputs[:, None].expand(n, k, width)
        ).rsample_with_logp()
        offsets = torch.cat(
            [
                torch.full((n, k), self.random_log_density, device=pi_inputs.device),
                current_logp,
                following_logp,
            ],
            dim=1,
        )
        return torch.cat([uniform, current, following], dim=1), offsets

    def _update_targets(self, timestep: int) -> None:
        if timestep - self.last_target_update >= self.config.target_network_update_freq:
            self.target.update(self.critic_params.data, self.config.tau)
            self.last_target_update = timestep

    def get_extra_state(self) -> dict[str, Any]:
        return {**super().get_extra_state(), "gradient_steps": self.gradient_steps}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.gradient_steps = int(state.get("gradient_steps", 0))


__all__ = ["CQLLearner"]
