"""PPO's update of several policies of one architecture at once (docs/design/multi-agent.md,
"Updates across policies").

One policy per agent gives each policy a hundred or so rows per iteration, so each of its
gradient steps is a few dozen tiny operations whose cost is per call. Here the policies' flat
parameters and Adam moments are stacked into ``[P, n]`` buffers (each layer a ``[P, out, in]``
view of them), and every step runs one batched forward pass, one written-out backward pass
(``manual_gradients``' formulas, with the KL penalty and the entropy bonus) and one Adam update
for all of them; each policy's loss is the mean over its own rows, its minibatches are the ones
the one-at-a-time update draws, and clipping and Adam stay per policy.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import torch

from rltrainer.algorithms.ppo.manual_gradients import ACTIVATION_BACKWARD, plain_actor_critic
from rltrainer.algorithms.ppo.train_batch import PPOBatch, explained_variance
from rltrainer.core.models import ACTIVATION_FNS

if TYPE_CHECKING:  # PPOLearners are passed; their module imports this one
    from rltrainer.core.learner import Learner

#: The update settings policies of one stack share (the learning rate and the adaptive KL
#: coefficient may differ: they are per-policy values of each step).
SHARED_SETTINGS = (
    "num_epochs",
    "minibatch_size",
    "train_batch_size",
    "clip_param",
    "vf_clip_param",
    "vf_loss_coeff",
    "entropy_coeff",
    "grad_clip",
    "grad_clip_by",
)
#: The most observation values the minibatches gathered at once hold (epochs at a time).
GATHERED_VALUES = 1 << 22
STAT_NAMES = ("policy_loss", "vf_loss", "entropy", "kl", "clipfrac", "total_loss")


def stack_key(learner: Learner) -> Hashable | None:
    """What ``learner`` may be stacked by (equal keys: one stack), or ``None``: it updates
    alone (another network than the plain actor-critic MLP, several learners, a compiled loss,
    an LSTM, an ``on_learn_on_batch`` callback). ``learner`` is a ``PPOLearner`` itself, not a
    subclass (``PPOLearner.stack_key`` checks: this module does not import it)."""
    module, cfg = learner.module, learner.config
    if not (
        plain_actor_critic(learner)
        and learner.optimizer._fused_step is None
        and not learner._calls_learn_hook  # on_learn_on_batch sees each policy's own batch
    ):
        return None
    flat = learner.flat_params
    layers = [p for pair in (*module._run_pi.params, *module._run_vf.params) for p in pair]
    in_order = len(layers) == len(flat.params) and all(
        a is b for a, b in zip(layers, flat.params, strict=False)
    )
    if not in_order or any(p.grad is None for p in flat.params):
        return None  # the flat buffer is not the policy MLP's then the value MLP's layers
    shapes = tuple(tuple(p.shape) for p in flat.params)
    settings = tuple(getattr(cfg, name) for name in SHARED_SETTINGS)
    optimizer = learner.optimizer
    return (
        shapes,
        module.activation,
        str(learner.device),
        flat.data.dtype,
        optimizer.betas,
        optimizer.eps,
        settings,
    )


def update_stacked(
    learners: list[Learner], rollouts: list[list[Any]], timestep: int
) -> list[dict[str, float]]:
    """Each learner's ``update(its rollouts, timestep)``, all of them stepped together (learners
    of one ``stack_key``); their stats in the same order."""
    prepared, results = [], [None] * len(learners)
    for i, (learner, policy_rollouts) in enumerate(zip(learners, rollouts, strict=True)):
        batch, extra = learner.on_learn_on_batch(learner.build_batch(policy_rollouts))
        if len(batch.obs) == 0:  # nothing to learn from: its own update says so
            results[i] = {**learner.update_from_batch(batch, timestep), **extra}
        else:
            prepared.append((i, batch, extra))
    if len(prepared) == 1:  # alone after all: the one-at-a-time update
        i, batch, extra = prepared[0]
        results[i] = {**learners[i].update_from_batch(batch, timestep), **extra}
    elif prepared:
        stack = [learners[i] for i, _, _ in prepared]
        stats = _Stack(stack).update([batch for _, batch, _ in prepared], timestep)
        for (i, _, extra), policy_stats in zip(prepared, stats, strict=True):
            results[i] = {**policy_stats, **extra}
    return results


class _Stack:
    """The stacked parameters and Adam state of ``learners`` for one update."""

    def __init__(self, learners: list[Learner]) -> None:
        self.learners = learners
        first = learners[0]
        self.config = first.config
        self.device = first.device
        self.size = len(learners)
        self.params = torch.stack([learner.flat_params.data for learner in learners])
        self.grads = torch.zeros_like(self.params)
        self.exp_avg = torch.stack([learner.optimizer.exp_avg for learner in learners])
        self.exp_avg_sq = torch.stack([learner.optimizer.exp_avg_sq for learner in learners])
        self.steps = [learner.optimizer.step_count for learner in learners]
        self.betas, self.eps = first.optimizer.betas, first.optimizer.eps
        self.views = first.flat_params.views
        module = first.module
        self.activation = module.activation
        self.act = ACTIVATION_FNS[module.activation]
        self.pi = self._layers(module._run_pi, 0)
        self.vf = self._layers(module._run_vf, 2 * len(module._run_pi.params))

    def _layers(self, mlp: Any, first_param: int) -> list[tuple[torch.Tensor, ...]]:
        """``(weights transposed [P, in, out], biases [P, 1, out], the weights' and biases'
        gradients, activate, weights [P, out, in])`` per layer: views of the stacked buffers."""
        layers = []
        for layer, ((weight, _), activate) in enumerate(zip(mlp.params, mlp.activate, strict=True)):
            w_slice, b_slice = self.views[first_param + 2 * layer], self.views[first_param + 2 * layer + 1]
            w_shape = (self.size, *weight.shape)
            weight = self.params[:, w_slice].view(w_shape)
            layers.append(
                (
                    weight.transpose(1, 2),
                    self.params[:, b_slice].unsqueeze(1),
                    self.grads[:, w_slice].view(w_shape),
                    self.grads[:, b_slice],
                    activate,
                    weight,
                )
            )
        return layers

    # --- the update ----------------------------------------------------------------------
    def update(self, batches: list[PPOBatch], timestep: int) -> list[dict[str, float]]:
        cfg = self.config
        lrs = [learner.set_lr_for(timestep) for learner in self.learners]
        kl_coeffs = [learner.kl_coeff for learner in self.learners]
        datas, minibatches, counts = [], [], []
        for learner, batch in zip(self.learners, batches, strict=True):
            data = PPOBatch(*(learner.to_tensor(column) for column in batch))
            # Advantages normalized over each policy's whole batch, as PPOLearner.update_from_batch does.
            advantages = data.advantages
            spread = advantages.std() if advantages.numel() > 1 else torch.zeros((), device=advantages.device)
            datas.append(data._replace(advantages=(advantages - advantages.mean()) / (spread + 1e-8)))
            size = len(advantages)
            full_batch = cfg.minibatch_size >= cfg.train_batch_size
            minibatch = size if full_batch else min(max(1, cfg.minibatch_size), size)
            minibatches.append(minibatch)
            counts.append(1 if minibatch >= size else size // minibatch)
        index, mask, rows = self._minibatch_rows(datas, minibatches, counts)
        whole = PPOBatch(*(torch.cat(column) for column in zip(*datas, strict=True)))
        whole = whole._replace(actions=whole.actions.long())
        zero = torch.zeros((), device=self.device)
        kl = torch.tensor(kl_coeffs, device=self.device).unsqueeze(1)
        # Per row: d mean / d row (1 / the policy's rows), 0 for padding (autograd's mean backward);
        # the per-row factors of the loss's terms, for every step at once.
        inv = torch.where(mask, torch.ones((), device=self.device) / rows, zero)
        factors = list(zip(mask, inv, inv * cfg.vf_loss_coeff, inv * kl, strict=True))
        steps = max(counts)
        # The minibatches of as many epochs as take up to GATHERED_VALUES observation values at once.
        chunk = max(1, GATHERED_VALUES // max(1, index[0].numel() * whole.obs[0].numel()))
        stats_sum = torch.zeros(self.size, len(STAT_NAMES), device=self.device)
        stats_count = [0] * self.size
        for first in range(0, cfg.num_epochs, chunk):
            gathered = self._gather(whole, index[first : first + chunk], mask)
            surrogate_grads = -inv * gathered.advantages  # d -mean(ratio * A) / d ratio per row
            flat = [column.flatten(0, 1).unbind(0) for column in (*gathered, surrogate_grads)]
            for epoch in range(first, min(first + chunk, cfg.num_epochs)):
                last_epoch = epoch == cfg.num_epochs - 1
                for step in range(steps):
                    active = [p for p in range(self.size) if counts[p] > step]
                    *mb, surrogate_grad = (column[(epoch - first) * steps + step] for column in flat)
                    mb = PPOBatch(*mb)
                    losses, stats = self._loss_and_gradients(
                        mb, surrogate_grad, *factors[step], rows, kl, last_epoch
                    )
                    active = self._finite(losses, active, mb, mask[step])
                    if not active:
                        continue
                    self._clip()
                    self._adam(active, lrs)
                    if last_epoch:
                        index_active = torch.tensor(active, device=self.device)
                        stats_sum.index_add_(0, index_active, stats[index_active])
                        for p in active:
                            stats_count[p] += 1
        means = (stats_sum / torch.tensor(stats_count, device=self.device).unsqueeze(1)).tolist()
        self._copy_back()
        results = []
        for learner, batch, mean, lr in zip(self.learners, batches, means, lrs, strict=True):
            result = dict(zip(STAT_NAMES, mean, strict=True))  # NaN where every step was skipped
            learner._adapt_kl_coeff(result["kl"])
            result["vf_explained_var"] = explained_variance(batch.vf_preds, batch.value_targets)
            result["cur_lr"] = lr
            result["cur_kl_coeff"] = learner.kl_coeff
            results.append(result)
        return results

    def _minibatch_rows(
        self, datas: list[PPOBatch], minibatches: list[int], counts: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows (of the policies' batches one after the other) of every minibatch of every
        epoch, ``[epochs, steps, P, rows]`` (padded to the largest minibatch with a row of the
        policy's own), the mask of real rows ``[steps, P, rows]`` (none where a policy has no
        minibatch at that step) and each policy's minibatch rows ``[P, 1]``. The permutations
        are drawn in the order the one-at-a-time update draws them: policy by policy, epoch by
        epoch."""
        epochs, steps, width = self.config.num_epochs, max(counts), max(minibatches)
        index = torch.zeros(epochs, steps, self.size, width, dtype=torch.long, device=self.device)
        mask = torch.zeros(steps, self.size, width, dtype=torch.bool, device=self.device)
        offset = 0
        for p, (data, minibatch, count) in enumerate(zip(datas, minibatches, counts, strict=True)):
            size = len(data.advantages)
            if minibatch >= size:  # Learner.minibatches: the whole batch, in order
                orders = torch.arange(size, device=self.device).expand(epochs, size)
            else:
                orders = torch.stack([torch.randperm(size, device=self.device) for _ in range(epochs)])
            used = orders[:, : count * minibatch].reshape(epochs, count, minibatch) + offset
            index[:, :, p, :] = used[:, :1, :1]  # padding (and missing steps): a row of its own
            index[:, :count, p, :minibatch] = used
            mask[:count, p, :minibatch] = True
            offset += size
        rows = torch.tensor(minibatches, dtype=torch.float32, device=self.device).unsqueeze(1)
        return index, mask, rows

    @staticmethod
    def _gather(whole: PPOBatch, index: torch.Tensor, mask: torch.Tensor) -> PPOBatch:
        """The minibatches at ``index`` (``[epochs, steps, P, rows]``), each column shaped so;
        a padding row's advantage is 0, so its surrogate terms and their gradients vanish."""
        flat = index.reshape(-1)
        gathered = type(whole)(*(column[flat].reshape(*index.shape, *column.shape[1:]) for column in whole))
        return gathered._replace(advantages=gathered.advantages.masked_fill_(~mask, 0.0))

    def _loss_and_gradients(
        self,
        mb: PPOBatch,
        surrogate_grad: torch.Tensor,
        mask: torch.Tensor,
        inv: torch.Tensor,
        vf_grad: torch.Tensor,
        kl_grad: torch.Tensor,
        rows: torch.Tensor,
        kl: torch.Tensor,
        with_stats: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each policy's loss ``[P]`` (and its six statistics ``[P, 6]``), the gradients of each
        in its row of the stacked gradients: ``manual_gradients.loss_and_gradients`` per policy,
        its means over the policy's real rows. Per row: ``mask`` (a real row), ``inv`` (1 / the
        policy's rows there, else 0), ``vf_grad`` and ``kl_grad`` (``inv`` times the value
        loss's and the KL penalty's coefficients), ``surrogate_grad`` (``-inv * advantages``)."""
        cfg = self.config
        zero = torch.zeros((), device=self.device)
        pi_layers = self._forward(self.pi, mb.obs)
        vf_layers = self._forward(self.vf, mb.obs)
        logp_all = torch.log_softmax(pi_layers[-1], dim=-1)  # Categorical
        index = mb.actions.unsqueeze(-1)
        # Padding rows: a ratio of 1, no advantage, no value error (out of every mean).
        logratio = torch.where(mask, logp_all.gather(-1, index).squeeze(-1) - mb.action_logp, zero)
        ratio = logratio.exp()
        surr1 = ratio * mb.advantages
        low, high = 1 - cfg.clip_param, 1 + cfg.clip_param
        surr2 = torch.clamp(ratio, low, high) * mb.advantages
        error = torch.where(mask, vf_layers[-1].squeeze(-1) - mb.value_targets, zero)
        squared = error.pow(2)
        clipped = squared if cfg.vf_clip_param is None else torch.clamp(squared, max=cfg.vf_clip_param)
        kl_terms = (ratio - 1) - logratio
        probs = logp_all.exp() if cfg.entropy_coeff > 0 or with_stats else None
        if with_stats:  # each term's mean, as PPOLearner.compute_loss has them
            pg_loss = -torch.min(surr1, surr2).sum(-1) / rows.squeeze(1)
            vf_loss = clipped.sum(-1) / rows.squeeze(1)
            approx_kl = kl_terms.sum(-1) / rows.squeeze(1)
            entropy = (-(probs * logp_all).sum(-1) * mask).sum(-1) / rows.squeeze(1)
            loss = pg_loss + cfg.vf_loss_coeff * vf_loss + kl.squeeze(1) * approx_kl
            if cfg.entropy_coeff > 0:
                loss = loss - cfg.entropy_coeff * entropy
        else:  # only to see that it is finite: the terms summed per row
            per_row = cfg.vf_loss_coeff * clipped - torch.min(surr1, surr2) + kl * kl_terms
            if cfg.entropy_coeff > 0:
                per_row = per_row + cfg.entropy_coeff * (probs * logp_all).sum(-1) * mask
            loss = per_row.sum(-1) / rows.squeeze(1)

        # Backward, per row (autograd's formulas, as manual_gradients writes them).
        if cfg.vf_clip_param is not None:  # clamp(max=): the gradient passes where not clipped
            vf_grad = torch.where(squared <= cfg.vf_clip_param, vf_grad, zero)
        grad_values = (vf_grad * (2 * error)).unsqueeze(-1)
        # min(surr1, surr2): surr1's gradient where it is the smaller, else surr2's, which the
        # clamp passes only in range (in range the two are equal: half each, summing to the same).
        in_range = (ratio >= low).logical_and_(ratio <= high)
        grad_ratio = torch.where(in_range.logical_or_(surr1 < surr2), surrogate_grad, zero)
        # The KL penalty kl * mean((ratio - 1) - logratio), then ratio = exp(logratio).
        grad_logratio = (grad_ratio + kl_grad) * ratio - kl_grad
        grad_logp = torch.zeros_like(logp_all).scatter_add_(-1, index, grad_logratio.unsqueeze(-1))
        if cfg.entropy_coeff > 0:  # -c * mean(-(exp(l) * l).sum()): d/dl = c / rows * (p * l + p)
            grad_entropy = (inv * cfg.entropy_coeff).unsqueeze(-1)
            grad_logp = grad_logp + grad_entropy * (probs * logp_all + probs)
        grad_logits = torch._log_softmax_backward_data(grad_logp, logp_all, -1, logp_all.dtype)
        self._backward(self.pi, pi_layers, grad_logits)
        self._backward(self.vf, vf_layers, grad_values)
        if not with_stats:
            return loss, None
        clipfrac = (((ratio - 1.0).abs() > cfg.clip_param) & mask).sum(-1) / rows.squeeze(1)
        return loss, torch.stack([pg_loss, vf_loss, entropy, approx_kl, clipfrac, loss], dim=1)

    def _forward(self, layers: list[tuple[torch.Tensor, ...]], x: torch.Tensor) -> list[torch.Tensor]:
        outputs = [x]
        for weight_t, bias, _, _, activate, _ in layers:
            x = torch.baddbmm(bias, x, weight_t)
            if activate:
                x = self.act(x)
            outputs.append(x)
        return outputs

    def _backward(
        self, layers: list[tuple[torch.Tensor, ...]], outputs: list[torch.Tensor], grad: torch.Tensor
    ) -> None:
        activation_backward = ACTIVATION_BACKWARD[self.activation]
        for layer in range(len(layers) - 1, -1, -1):
            _, _, weight_grad, bias_grad, activate, weight = layers[layer]
            if activate:
                grad = activation_backward(grad, outputs[layer + 1])
            torch.bmm(grad.transpose(1, 2), outputs[layer], out=weight_grad)
            torch.sum(grad, 1, out=bias_grad)
            if layer > 0:  # the network's input needs no gradient
                grad = torch.bmm(grad, weight)

    def _finite(self, losses: torch.Tensor, active: list[int], mb: PPOBatch, mask: torch.Tensor) -> list[int]:
        """The active policies whose loss is finite (one device read for all); a policy whose
        loss is not is its learner's to decide (``on_nonfinite``: raise, or skip its step)."""
        if bool(torch.isfinite(losses).all()):
            return active
        kept = []
        for p in active:
            learner = self.learners[p]
            rows = mask[p]
            own = type(mb)(*(None if column is None else column[p][rows] for column in mb))
            if learner.loss_is_finite(losses[p], lambda learner=learner, own=own: learner.loss_terms(own)):
                kept.append(p)
        return kept

    def _clip(self) -> None:
        """Each policy's gradients clipped as ``FlatParameters.clip_grad`` clips them."""
        clip, by = self.config.grad_clip, self.config.grad_clip_by
        if clip is None:
            return
        grads = self.grads
        if by == "value":
            grads.clamp_(-clip, clip)
        elif by == "global_norm":
            grads.mul_(torch.clamp(clip / (grads.norm(dim=1, keepdim=True) + 1e-6), max=1.0))
        else:
            for view in self.views:
                grad = grads[:, view]
                grad.mul_(torch.clamp(clip / (grad.norm(dim=1, keepdim=True) + 1e-6), max=1.0))

    def _adam(self, active: list[int], lrs: list[float]) -> None:
        """``optim.Adam.step`` for each active policy's row: its own step count, learning rate
        and moments (the same elementwise operations; ``addcdiv``'s ``value * a / b``)."""
        beta1, beta2 = self.betas
        everyone = len(active) == self.size
        index = None if everyone else torch.tensor(active, device=self.device)
        params, grads, exp_avg, exp_avg_sq = (
            (self.params, self.grads, self.exp_avg, self.exp_avg_sq)
            if everyone
            else (self.params[index], self.grads[index], self.exp_avg[index], self.exp_avg_sq[index])
        )
        exp_avg.lerp_(grads, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
        step_sizes, bias2_roots = [], []
        for p in active:
            self.steps[p] += 1
            step_sizes.append(-lrs[p] / (1 - beta1 ** self.steps[p]))
            bias2_roots.append(math.sqrt(1 - beta2 ** self.steps[p]))
        step_size = torch.tensor(step_sizes, device=self.device).unsqueeze(1)
        bias2_root = torch.tensor(bias2_roots, device=self.device).unsqueeze(1)
        denom = torch.sqrt(exp_avg_sq).div_(bias2_root).add_(self.eps)
        params.add_(exp_avg.mul(step_size).div_(denom))
        if not everyone:
            self.params.index_copy_(0, index, params)
            self.exp_avg.index_copy_(0, index, exp_avg)
            self.exp_avg_sq.index_copy_(0, index, exp_avg_sq)

    def _copy_back(self) -> None:
        """Each policy's row into its learner's own buffers: what its weights, state and
        checkpoints read."""
        for p, learner in enumerate(self.learners):
            learner.flat_params.data.copy_(self.params[p])
            learner.optimizer.exp_avg.copy_(self.exp_avg[p])
            learner.optimizer.exp_avg_sq.copy_(self.exp_avg_sq[p])
            learner.optimizer.step_count = self.steps[p]
