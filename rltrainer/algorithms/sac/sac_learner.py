"""SAC's module and losses: twin soft Q critics, a squashed-Gaussian (or categorical) actor,
automatic entropy tuning, Polyak-averaged target critics.

Continuous actions: Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications").
Discrete actions: Christodoulou 2019 ("Soft Actor-Critic for Discrete Action Settings"),
where expectations over the policy are exact sums over the actions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from rltrainer.algorithms.sac.sac_config import SACConfig
from rltrainer.core.actor_critic_learner import ActorCriticLearner, ActorCriticModule, ParameterModule, min_q
from rltrainer.core.models import ContinuousQ, PolicyMLP, QNetwork, TargetCopy
from rltrainer.utils.replay_buffers import ReplayBatch


class SACModule(ActorCriticModule):
    """``pi`` (distribution inputs), critics ``q1`` (and ``q2``), their targets, and ``log_alpha``."""

    def __init__(
        self,
        obs_size: int,
        num_actions: int | None,
        action_size: int,
        policy_model: dict[str, Any],
        q_model: dict[str, Any],
        twin_q: bool,
        initial_alpha: float,
        make_encoder: Any = None,
    ) -> None:
        """``make_encoder``: a factory of observation encoders (conv stacks, a custom model);
        the actor and every critic get their own, as in SB3's SAC and RLlib's."""
        super().__init__()
        self.discrete = num_actions is not None
        pi_outputs = num_actions if self.discrete else 2 * action_size
        self.pi = PolicyMLP(
            obs_size,
            pi_outputs,
            policy_model["fcnet_hiddens"],
            policy_model["fcnet_activation"],
            make_encoder,
        )
        q_hiddens, q_activation = q_model["fcnet_hiddens"], q_model["fcnet_activation"]

        def critic() -> nn.Module:
            if self.discrete:  # Q(s, .) for every action at once
                return QNetwork(obs_size, num_actions, [], q_hiddens, q_activation, False, make_encoder)
            return ContinuousQ(obs_size, action_size, q_hiddens, q_activation, make_encoder)

        self.add_critics(critic, twin_q)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha), dtype=torch.float32))


class SACLearner(ActorCriticLearner):
    """Per replayed batch: one critic step, one actor step, one temperature step, a target update."""

    STAT_KEYS = SACConfig.STAT_KEYS  # declared with the config: stop criteria are checked without torch

    def __init__(self, module: SACModule, dist_class: type, config: Any, device: str = "cpu") -> None:
        super().__init__(module, dist_class, config, device)
        self.actor_params, self.critic_params = self.params["actor"], self.params["critic"]
        self.target = TargetCopy(nn.ModuleList(module.target_critics()))
        self.target_entropy = config.get_target_entropy(module.discrete, self._action_dims())
        self.last_target_update = 0

    def optimizer_parts(self) -> dict[str, tuple[nn.Module, float]]:
        m, opt = self.module, self.config.optimization_config
        return {
            "actor": (m.pi, opt["actor_learning_rate"]),
            "critic": (nn.ModuleList(m.critics()), opt["critic_learning_rate"]),
            "alpha": (ParameterModule(m.log_alpha), opt["entropy_learning_rate"]),
        }

    def _action_dims(self) -> int:
        outputs = self.module.pi.net[-1].out_features
        return outputs if self.module.discrete else outputs // 2

    def update_from_batch(self, batch: ReplayBatch, timestep: int) -> dict[str, float]:
        b = batch
        obs, next_obs = self.to_tensor(b.obs), self.to_tensor(b.next_obs)
        rewards, weights = self.to_tensor(b.rewards), self.to_tensor(b.weights)
        bootstrap = self.to_tensor(b.discounts * (1.0 - b.terminateds))  # gamma^k, 0 after a termination
        actions = self.to_tensor(b.actions.astype(np.int64)[:, None] if self.module.discrete else b.actions)
        alpha = self.module.log_alpha.detach().exp()
        m = self.module

        # --- critic: soft Bellman residual (Haarnoja et al. 2018, eq. 5; Christodoulou eq. 10)
        with torch.no_grad():
            if m.discrete:
                next_logp = torch.log_softmax(m.pi(next_obs), -1)
                q_next_all = min_q(m.target_critics(), next_obs) - alpha * next_logp
                v_next = (next_logp.exp() * q_next_all).sum(-1)
            else:
                next_actions, next_logp = self.dist_class(m.pi(next_obs)).rsample_with_logp()
                v_next = min_q(m.target_critics(), next_obs, next_actions) - alpha * next_logp
            q_target = rewards + bootstrap * v_next
        q_values = [self._q_taken(q, obs, actions) for q in m.critics()]
        critic_loss = sum(0.5 * (weights * (q - q_target).pow(2)).mean() for q in q_values)
        self.step("critic", critic_loss)

        # --- actor: minimize E[alpha log pi(a|s) - Q(s, a)] (eq. 7; Christodoulou eq. 12)
        if m.discrete:
            logp = torch.log_softmax(m.pi(obs), -1)
            with torch.no_grad():
                q_all = min_q(m.critics(), obs)
            probs = logp.exp()
            actor_loss = (probs * (alpha * logp - q_all)).sum(-1).mean()
            entropy = -(probs * logp).sum(-1).detach()
        else:
            new_actions, logp = self.dist_class(m.pi(obs)).rsample_with_logp()
            actor_loss = (alpha * logp - min_q(m.critics(), obs, new_actions)).mean()
            entropy = -logp.detach()
        self.step("actor", actor_loss, inputs=self.actor_params.params)

        # --- temperature: J(alpha) = E[-alpha (log pi + target_entropy)] (eq. 18), via log alpha
        alpha_loss = m.log_alpha * (entropy - self.target_entropy).mean()
        self.step("alpha", alpha_loss)

        if timestep - self.last_target_update >= self.config.target_network_update_freq:
            self.target.update(self.critic_params.data, self.config.tau)
            self.last_target_update = timestep
        self.set_td_errors(q_values[0] - q_target)
        stats = torch.stack(
            [
                critic_loss.detach(),
                actor_loss.detach(),
                alpha_loss.detach(),
                alpha,
                q_values[0].detach().mean(),
            ]
        ).tolist()
        return dict(zip(self.STAT_KEYS, [*stats, float(entropy.mean())], strict=True))

    def _q_taken(self, q: nn.Module, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return q(obs).gather(1, actions).squeeze(1) if self.module.discrete else q(obs, actions)

    def get_extra_state(self) -> dict[str, Any]:
        return {"last_target_update": self.last_target_update}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
