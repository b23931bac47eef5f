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
from rltrainer.core.learner import ADAM_EPS, Learner
from rltrainer.core.models import ContinuousQ, PolicyMLP, QNetwork, TargetCopy
from rltrainer.core.optim import Adam, FlatParameters
from rltrainer.utils.replay_buffers import ReplayBatch


class SACModule(nn.Module):
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

        self.q1 = critic()
        self.q2 = critic() if twin_q else None
        self.q1_target = critic()
        self.q2_target = critic() if twin_q else None
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            if online is not None:
                target.load_state_dict(online.state_dict())
                target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha), dtype=torch.float32))

    def critics(self) -> list[nn.Module]:
        return [q for q in (self.q1, self.q2) if q is not None]

    def target_critics(self) -> list[nn.Module]:
        return [q for q in (self.q1_target, self.q2_target) if q is not None]

    def numpy_policy(self):
        return self.pi.numpy_policy()


def min_q(critics: list[nn.Module], *inputs: torch.Tensor) -> torch.Tensor:
    """Clipped double Q (Fujimoto et al. 2018): the minimum over the critics."""
    values = [q(*inputs) for q in critics]
    return values[0] if len(values) == 1 else torch.minimum(values[0], values[1])


class SACLearner(Learner):
    """Per replayed batch: one critic step, one actor step, one temperature step, a target update."""

    STAT_KEYS = SACConfig.STAT_KEYS  # declared with the config: stop criteria are checked without torch

    def __init__(self, module: SACModule, dist_class: type, config: Any, device: str = "cpu") -> None:
        # Three optimizers over disjoint parameters, so the base class's single one is not built.
        self.config = config
        self.device = torch.device(device)
        self.module = module.to(self.device)
        self.train_module = self.module
        self.world_size = 1
        self.dist_class = dist_class
        opt = config.optimization_config
        self.actor_params = FlatParameters(module.pi)
        self.critic_params = FlatParameters(nn.ModuleList(module.critics()))
        self.alpha_params = FlatParameters(_Wrap(module.log_alpha))
        self.optimizers = {
            "actor": Adam(self.actor_params, lr=opt["actor_learning_rate"], eps=ADAM_EPS),
            "critic": Adam(self.critic_params, lr=opt["critic_learning_rate"], eps=ADAM_EPS),
            "alpha": Adam(self.alpha_params, lr=opt["entropy_learning_rate"], eps=ADAM_EPS),
        }
        self.target = TargetCopy(nn.ModuleList(module.target_critics()))
        self.target_entropy = config.get_target_entropy(module.discrete, self._action_dims())
        self.last_target_update = 0
        self.last_td_errors = np.zeros(0, dtype=np.float32)
        self.init_callbacks()

    def _action_dims(self) -> int:
        outputs = self.module.pi.net[-1].out_features
        return outputs if self.module.discrete else outputs // 2

    def build_batch(self, batch: ReplayBatch) -> ReplayBatch:
        return batch

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
        self._step("critic", critic_loss)

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
        self._step("actor", actor_loss, inputs=self.actor_params.params)

        # --- temperature: J(alpha) = E[-alpha (log pi + target_entropy)] (eq. 18), via log alpha
        alpha_loss = m.log_alpha * (entropy - self.target_entropy).mean()
        self._step("alpha", alpha_loss)

        if timestep - self.last_target_update >= self.config.target_network_update_freq:
            self.target.update(self.critic_params.data, self.config.tau)
            self.last_target_update = timestep
        td_errors = (q_values[0] - q_target).detach()
        # No NaN priorities for the replay buffer from a skipped step (on_nonfinite="skip_batch").
        self.last_td_errors = torch.nan_to_num(td_errors, nan=0.0, posinf=0.0, neginf=0.0).cpu().numpy()
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

    def _step(self, name: str, loss: torch.Tensor, inputs: list[torch.Tensor] | None = None) -> None:
        params = {"actor": self.actor_params, "critic": self.critic_params, "alpha": self.alpha_params}[name]
        if not self.loss_is_finite(loss, lambda: {f"{name}_loss": float(loss)}):
            return  # on_nonfinite="skip_batch"
        params.zero_grad()
        # inputs: only the actor's gradients (backpropagating through the critics to the action
        # without accumulating gradients into the critics' weights).
        loss.backward(inputs=inputs)
        if self.config.grad_clip is not None:
            params.clip_grad(self.config.grad_clip, self.config.grad_clip_by)
        self.optimizers[name].step()

    def get_policy_weights(self) -> dict[str, torch.Tensor]:
        """Only what env runners act with: the actor."""
        return {f"pi.{k}": v.detach().cpu().clone() for k, v in self.module.pi.state_dict().items()}

    # --- state: three optimizers, target-update bookkeeping ------------------------------
    def get_optimizer_state(self) -> dict[str, torch.Tensor]:
        return {
            f"{name}.{k}": v for name, opt in self.optimizers.items() for k, v in opt.state_tensors().items()
        }

    def set_optimizer_state(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, opt in self.optimizers.items():
            prefix = f"{name}."
            opt.load_state_tensors({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})

    def get_extra_state(self) -> dict[str, Any]:
        return {"last_target_update": self.last_target_update}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))

    def setup_data_parallel(self, init_method: str, rank: int, world_size: int) -> None:
        raise NotImplementedError("SAC trains in the driver (num_learners=0)")


class _Wrap(nn.Module):
    """A module holding one existing parameter (for FlatParameters)."""

    def __init__(self, parameter: nn.Parameter) -> None:
        super().__init__()
        self.parameter = parameter
