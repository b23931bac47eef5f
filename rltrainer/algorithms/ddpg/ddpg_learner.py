"""DDPG's and TD3's module and losses: a deterministic tanh actor, one or two Q critics, target
copies of both, Polyak-averaged.

DDPG: Lillicrap et al. 2016 ("Continuous control with deep reinforcement learning").
TD3: Fujimoto et al. 2018 ("Addressing Function Approximation Error in Actor-Critic Methods"):
clipped double Q (``twin_q``), delayed actor and target updates (``policy_delay``), target
policy smoothing (``smooth_target_policy``). The same step does both; the config picks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig
from rltrainer.core.actor_critic_learner import ActorCriticLearner, ActorCriticModule, freeze_as_target, min_q
from rltrainer.core.learner import DeferredStats
from rltrainer.core.models import ContinuousQ, PolicyMLP, TargetCopy, TwinMLP
from rltrainer.utils.replay_buffers import ReplayBatch


class DDPGModule(ActorCriticModule):
    """``pi`` (pre-tanh actions), critics ``q1`` (and ``q2``) and target copies of all of them."""

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        config: DDPGConfig,
        make_encoder: Any = None,
    ) -> None:
        """``make_encoder``: a factory of observation encoders (conv stacks, a custom model);
        the actor and every critic get their own, as SAC's do."""
        super().__init__()
        cfg = config

        def actor() -> PolicyMLP:
            return PolicyMLP(
                obs_size, action_size, cfg.actor_hiddens, cfg.actor_hidden_activation, make_encoder
            )

        def critic() -> ContinuousQ:
            return ContinuousQ(
                obs_size, action_size, cfg.critic_hiddens, cfg.critic_hidden_activation, make_encoder
            )

        self.pi, self.pi_target = actor(), actor()
        freeze_as_target(self.pi, self.pi_target)
        self.add_critics(critic, cfg.twin_q)


class DDPGLearner(ActorCriticLearner):
    """Per replayed batch: a critic step; every ``policy_delay`` batches an actor step and a
    Polyak update of the target actor and critics."""

    STAT_KEYS = DDPGConfig.STAT_KEYS  # declared with the config: stop criteria are checked without torch
    FUSED_ADAM = True  # a step per env step: one kernel instead of seven ops per part

    def __init__(self, module: DDPGModule, dist_class: type, config: Any, device: str = "cpu") -> None:
        super().__init__(module, dist_class, config, device)
        self.actor_target = TargetCopy(module.pi_target)
        self.critic_target = TargetCopy(nn.ModuleList(module.target_critics()))
        # Weight decay on the critics' weights (not biases), added to their loss as RLlib's l2_reg.
        self._critic_weights = [p for q in module.critics() for n, p in q.named_parameters() if "weight" in n]
        self.num_critic_updates = 0
        self.last_target_update = 0
        self._constants: dict[float, torch.Tensor] = {}  # see _constant
        # the last actor step's loss, reported between actor steps
        self._last_actor_loss = torch.tensor(float("nan"), device=self.device)
        # Plain MLPs whose activation's derivative is known: the update writes the gradients by
        # hand instead of through autograd (docs/design/learning.md), unless compiled.
        nets = (module.pi, *module.critics())
        self._by_hand = not config.torch_compile_learner and all(
            net.encoder is None and net._run.has_backward for net in nets
        )
        # Twin critics (and their targets) as one network each: batched products over both.
        self._twins: tuple[TwinMLP, TwinMLP] | None = None
        if self._by_hand and module.q2 is not None:
            try:
                self._twins = (
                    TwinMLP(module.q1._run, module.q2._run),
                    TwinMLP(module.q1_target._run, module.q2_target._run),
                )
            except ValueError:  # not laid out as twins in their buffers: one after the other
                self._twins = None

    def optimizer_parts(self) -> dict[str, tuple[nn.Module, float]]:
        m, cfg = self.module, self.config
        return {"actor": (m.pi, cfg.actor_lr), "critic": (nn.ModuleList(m.critics()), cfg.critic_lr)}

    def update_from_batch(self, batch: ReplayBatch, timestep: int) -> DeferredStats:
        if self._by_hand:
            return self._update_by_hand(batch, timestep)
        cfg, m, b = self.config, self.module, batch
        obs, next_obs = self.to_tensor(b.obs), self.to_tensor(b.next_obs)
        rewards, weights = self.to_tensor(b.rewards), self.to_tensor(b.weights)
        bootstrap = self.to_tensor(b.discounts * (1.0 - b.terminateds))  # gamma^k, 0 after a termination
        actions = self.to_tensor(b.actions)

        # --- critics: regress on r + gamma^k min_j Q'_j(s', pi'(s') [+ clipped noise])
        with torch.no_grad():
            next_actions = torch.tanh(m.pi_target(next_obs))
            if cfg.smooth_target_policy:
                noise = (torch.randn_like(next_actions) * cfg.target_noise).clamp(
                    -cfg.target_noise_clip, cfg.target_noise_clip
                )
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            q_target = rewards + bootstrap * min_q(m.target_critics(), next_obs, next_actions)
        q_values = [q(obs, actions) for q in m.critics()]
        critic_loss = sum((weights * self._td_loss(q - q_target)).mean() for q in q_values)
        if cfg.l2_reg > 0:
            critic_loss = critic_loss + cfg.l2_reg * sum(w.pow(2).sum() for w in self._critic_weights)
        self.step("critic", critic_loss)
        self.num_critic_updates += 1

        # --- actor (every policy_delay critic steps): maximize Q1(s, pi(s)); then the targets
        if self.num_critic_updates % cfg.policy_delay == 0:
            actor_loss = -m.q1(obs, torch.tanh(m.pi(obs))).mean()
            self.step("actor", actor_loss, inputs=self.params["actor"].params)
            self._last_actor_loss = actor_loss.detach()
            if timestep - self.last_target_update >= cfg.target_network_update_freq:
                self.update_targets(timestep)

        self.set_td_errors(q_values[0] - q_target)
        return self._stats(critic_loss.detach(), q_values[0].detach())

    def update_targets(self, timestep: int) -> None:
        """Polyak-average the target actor and critics towards the online ones."""
        self.actor_target.update(self.params["actor"].data, self.config.tau)
        self.critic_target.update(self.params["critic"].data, self.config.tau)
        self.last_target_update = timestep

    def _stats(
        self, critic_loss: torch.Tensor | Callable[[], torch.Tensor], q1: torch.Tensor
    ) -> DeferredStats:
        """The update's stats, computed when read (an iteration reports only its last update's):
        ``critic_loss`` (or the function computing it), ``q1`` and the last actor loss are
        tensors no later update writes to."""
        actor_loss = self._last_actor_loss  # (or the function computing it)

        def compute() -> dict[str, float]:
            losses = [loss() if callable(loss) else loss for loss in (critic_loss, actor_loss)]
            stats = [*losses, q1.mean(), *reversed(torch.aminmax(q1))]
            return dict(zip(self.STAT_KEYS, torch.stack(stats).tolist(), strict=True))

        return DeferredStats(compute)

    @torch.no_grad()
    def _update_by_hand(self, b: ReplayBatch, timestep: int) -> DeferredStats:
        """``update_from_batch``'s losses and steps with hand-written gradients (plain MLPs:
        ``FastMLP.forward_saved`` and ``FastMLP.backward``), no autograd graph."""
        cfg, m = self.config, self.module
        obs, next_obs = self.to_tensor(b.obs), self.to_tensor(b.next_obs)
        # rewards, weights and bootstraps as [B, 1] columns, the critics' output shape
        rewards, weights = self.to_tensor(b.rewards.reshape(-1, 1)), self.to_tensor(b.weights.reshape(-1, 1))
        bootstrap = self.to_tensor((b.discounts * (1.0 - b.terminateds)).reshape(-1, 1))
        # the critics' inputs joined in numpy: half of torch.cat's cost on rows this small
        inputs = self.to_tensor(np.concatenate([b.obs, b.actions], axis=-1))
        batch_size = obs.shape[0]

        # --- critics: regress on r + gamma^k min_j Q'_j(s', pi'(s') [+ clipped noise])
        next_actions = torch.tanh_(m.pi_target._run.forward_saved(next_obs)[-1])  # (activations in place)
        if cfg.smooth_target_policy:
            noise = torch.randn_like(next_actions).mul_(self._constant(cfg.target_noise))
            noise.clamp_(-cfg.target_noise_clip, cfg.target_noise_clip)
            next_actions = next_actions.add_(noise).clamp_(-1.0, 1.0)
        next_inputs = torch.cat([next_obs, next_actions], dim=-1)
        if self._twins is not None:  # [2, B, 1]: both critics at once
            twin, twin_target = self._twins
            next_q = twin_target(next_inputs).amin(0)
            saved = twin.forward_saved(inputs)
            q_values = saved[-1]
        else:
            next_q = [q._run(next_inputs) for q in m.target_critics()]
            next_q = next_q[0] if len(next_q) == 1 else torch.minimum(next_q[0], next_q[1])
            saved = [q._run.forward_saved(inputs) for q in m.critics()]
            q_values = torch.stack([s[-1] for s in saved])
        q_target = torch.addcmul(rewards, bootstrap, next_q)
        errors = q_values - q_target  # [critics, B, 1]

        def critic_loss_of() -> torch.Tensor:
            loss = (weights * self._td_loss(errors)).mean(1).sum()
            if cfg.l2_reg > 0:
                loss = loss + cfg.l2_reg * sum(w.pow(2).sum() for w in self._critic_weights)
            return loss

        # The squared errors' sum is finite exactly when the squared-error loss is: one op to
        # check instead of five, the loss itself computed only when reported (DeferredStats).
        finite, critic_loss = None, critic_loss_of
        if cfg.use_huber or cfg.l2_reg > 0:
            critic_loss = critic_loss_of()
        else:
            finite = torch.dot(errors.reshape(-1), errors.reshape(-1))

        def critic_gradients() -> None:
            td_grad = errors if not cfg.use_huber else errors.clamp(-cfg.huber_threshold, cfg.huber_threshold)
            grads = (weights * td_grad).div_(self._constant(batch_size))  # d loss / d Q: [critics, B, 1]
            if self._twins is not None:
                self._twins[0].backward(saved, grads)
            else:
                for q, s, grad in zip(m.critics(), saved, grads, strict=True):
                    q._run.backward(s, grad)
            for w in self._critic_weights if cfg.l2_reg > 0 else ():
                w.grad.add_(w, alpha=2.0 * cfg.l2_reg)

        self.step("critic", critic_loss, gradients=critic_gradients, finite=finite)
        self.num_critic_updates += 1

        # --- actor (every policy_delay critic steps): maximize Q1(s, pi(s)); then the targets
        if self.num_critic_updates % cfg.policy_delay == 0:
            pi_saved = m.pi._run.forward_saved(obs)
            pi_actions = torch.tanh(pi_saved[-1])
            q1_saved = m.q1._run.forward_saved(torch.cat([obs, pi_actions], dim=-1))
            q1_mean = q1_saved[-1].mean()  # the actor's loss is its negative (taken when read)

            def actor_gradients() -> None:
                grad = torch.full_like(q1_saved[-1], -1.0 / batch_size)
                grad = m.q1._run.backward(q1_saved, grad, param_grads=False, input_grad=True)
                grad = torch.ops.aten.tanh_backward.default(grad[:, obs.shape[1] :], pi_actions)
                m.pi._run.backward(pi_saved, grad)

            self.step("actor", q1_mean.neg, gradients=actor_gradients, finite=q1_mean)
            self._last_actor_loss = q1_mean.neg
            if timestep - self.last_target_update >= cfg.target_network_update_freq:
                self.update_targets(timestep)

        self.set_td_errors(errors, first_critics=True)
        return self._stats(critic_loss, q_values[0])

    def _constant(self, value: float) -> torch.Tensor:
        """``value`` as a 0-dim float32 tensor on the learner's device, made once: an op with a
        Python number first converts it to a tensor of its own (a few microseconds per op);
        the result is the same (the number enters float32 ops as float32 either way)."""
        constant = self._constants.get(value)
        if constant is None:
            constant = self._constants[value] = torch.tensor(value, dtype=torch.float32, device=self.device)
        return constant

    def _td_loss(self, error: torch.Tensor) -> torch.Tensor:
        if not self.config.use_huber:
            return 0.5 * error.pow(2)
        delta = self.config.huber_threshold
        return torch.nn.functional.huber_loss(error, torch.zeros_like(error), reduction="none", delta=delta)

    def get_extra_state(self) -> dict[str, Any]:
        return {"last_target_update": self.last_target_update, "num_critic_updates": self.num_critic_updates}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.last_target_update = int(state.get("last_target_update", 0))
        self.num_critic_updates = int(state.get("num_critic_updates", 0))
