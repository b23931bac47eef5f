"""PPO's loss and its gradients without autograd, for the plain actor-critic MLP.

The tuned CartPole example takes 20 gradient steps of a 4-64-64 policy and value MLP per
256 sampled steps. At that size autograd's bookkeeping (a graph recorded in the forward pass,
then walked node by node in ``backward``) costs more than the arithmetic. Here the forward
pass runs without recording, and the backward pass is written out with the same ops, in the
same order, that autograd's derivative formulas run (torch's ``derivatives.yaml``: addmm,
relu/tanh, log_softmax, gather, exp, clamp, minimum, mean, pow; the clipped minimum's in one
``where``, whose values are those of autograd's tie split), and its constant start is cached
per minibatch size, so the loss, the statistics and every gradient are bitwise what
``PPOLearner.compute_loss`` and ``backward()`` give (``tests/test_ppo_manual_gradients.py``
checks it, ties included).

It applies only where those formulas are all there is (``applies``): ``ActorCritic`` with
separate policy and value MLPs, a categorical policy, no entropy bonus, no KL penalty, one
learner, no ``torch.compile`` and no LSTM. Everything else goes through autograd.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from rltrainer.core.distributions import Categorical
from rltrainer.core.models import ActorCritic

if TYPE_CHECKING:  # a PPOLearner is passed; its module imports this one
    from rltrainer.algorithms.ppo.train_batch import PPOBatch
    from rltrainer.core.learner import Learner

#: The activations whose derivative is written out: autograd's formula for each (grad, output).
ACTIVATION_BACKWARD = {
    "relu": lambda grad, out: torch.ops.aten.threshold_backward(grad, out, 0),
    "tanh": lambda grad, out: torch.ops.aten.tanh_backward(grad, out),
}


def plain_actor_critic(learner: Learner) -> bool:
    """Whether ``learner`` trains the plain actor-critic MLP whose backward pass is written out
    (in one process, no LSTM, compiled loss, hooks or free log-std): this module's and the
    stacked multi-agent update's common ground."""
    module, cfg = learner.module, learner.config
    return (
        type(module) is ActorCritic
        and learner.dist_class is Categorical
        and learner.train_module is module
        and learner.world_size == 1
        and not learner.recurrent
        and not cfg.torch_compile_learner
        and module.trunk is None
        and not module.free_log_std
        and module.activation in ACTIVATION_BACKWARD
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and not module._run_pi.activate[-1]
        and not module._run_vf.activate[-1]
    )


def applies(learner: Learner) -> bool:
    """Whether ``learner``'s network and settings are those written out here (its class checks
    that its loss is ``PPOLearner``'s own)."""
    cfg = learner.config
    return (
        plain_actor_critic(learner)
        and cfg.entropy_coeff == 0
        and cfg.kl_coeff == 0
        and all(p.requires_grad and p.grad is not None for p in learner.module.parameters())
    )


def loss_and_gradients(
    learner: Learner, mb: PPOBatch, with_stats: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``compute_loss(mb, with_stats)``'s ``(loss, stats)``, with the loss's gradients written
    into the parameters' ``.grad`` (what ``zero_grad()`` and ``loss.backward()`` leave there)."""
    cfg, module = learner.config, learner.module
    with torch.no_grad():
        # Forward: the loss of PPOLearner.compute_loss, keeping what the backward pass reads.
        pi_layers = module._run_pi.forward_saved(mb.obs)
        vf_layers = module._run_vf.forward_saved(mb.obs)
        logp_all = torch.log_softmax(pi_layers[-1], dim=-1)  # Categorical
        index = mb.actions.long().unsqueeze(-1)
        logratio = logp_all.gather(-1, index).squeeze(-1) - mb.action_logp
        ratio = logratio.exp()
        surr1 = ratio * mb.advantages
        low, high = 1 - cfg.clip_param, 1 + cfg.clip_param
        surr2 = torch.clamp(ratio, low, high) * mb.advantages
        pg_loss = -torch.min(surr1, surr2).mean()
        error = vf_layers[-1].squeeze(-1) - mb.value_targets
        squared = error.pow(2)
        vf_loss = squared if cfg.vf_clip_param is None else torch.clamp(squared, max=cfg.vf_clip_param)
        vf_loss = vf_loss.mean()
        loss = pg_loss + cfg.vf_loss_coeff * vf_loss

        # Backward, node by node from d loss / d loss = 1 (autograd's formulas, its op order).
        grad, grad_min, zero = _mean_gradients(mb.obs.shape[0], cfg.vf_loss_coeff, loss.dtype, loss.device)
        if cfg.vf_clip_param is not None:  # clamp(max=): the gradient passes where not clipped
            grad = torch.where(squared <= cfg.vf_clip_param, grad, zero)
        grad_values = (grad * (2 * error)).unsqueeze(-1)  # pow(2) (its error.pow(1) is error), then squeeze
        # min(surr1, surr2): surr1's gradient where it is the smaller, else surr2's, which the
        # clamp passes only in range. Autograd splits a tie half and half; a tie in range sums
        # to the same value (halving is exact), and out of range it needs a zero advantage.
        in_range = (ratio >= low).logical_and_(ratio <= high)
        grad_ratio = torch.where(in_range.logical_or_(surr1 < surr2), grad_min * mb.advantages, zero)
        grad_logp = torch.zeros_like(logp_all).scatter_add_(-1, index, (grad_ratio * ratio).unsqueeze(-1))
        grad_logits = torch._log_softmax_backward_data(grad_logp, logp_all, -1, logp_all.dtype)
        _mlp_backward(module._run_pi, pi_layers, grad_logits, module.activation)
        _mlp_backward(module._run_vf, vf_layers, grad_values, module.activation)
        if not with_stats:
            return loss, None
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > cfg.clip_param).float().mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        stats = torch.stack([pg_loss, vf_loss, entropy.mean(), approx_kl, clipfrac, loss])
    return loss, stats


@functools.lru_cache(maxsize=16)
def _mean_gradients(
    rows: int, vf_loss_coeff: float, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, ...]:
    """What the backward pass starts from, the same for every step on ``rows`` rows: d loss /
    d row of the value loss's mean (1 * coeff, expanded, / rows) and of the surrogate's (-1,
    expanded, / rows), and a zero, as autograd computes them from a loss of ``dtype``."""
    one = torch.ones((), dtype=dtype, device=device)
    grad_min = one.neg().expand(rows) / rows  # neg, then mean
    grad_values = (one * vf_loss_coeff).expand(rows) / rows  # mul, then mean
    return grad_values, grad_min, torch.zeros((), dtype=dtype, device=device)


def _mlp_backward(mlp: Any, outputs: list[torch.Tensor], grad: torch.Tensor, activation: str) -> None:
    """Write each layer's weight and bias gradients (``addmm``'s formulas for a weight used
    transposed), from ``grad``, the gradient of the last layer's output."""
    activation_backward = ACTIVATION_BACKWARD[activation]
    for layer in range(len(mlp.params) - 1, -1, -1):
        weight, bias = mlp.params[layer]
        if mlp.activate[layer]:
            grad = activation_backward(grad, outputs[layer + 1])
        weight.grad.copy_(grad.t().mm(outputs[layer]))
        torch.sum(grad, 0, keepdim=True, out=bias.grad.view(1, -1))
        if layer > 0:  # the network's input needs no gradient
            grad = grad.mm(weight)
