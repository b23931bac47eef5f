"""The default actor-critic MLP.

Parameter names are kept plain (``pi.0.weight``, ``vf.2.bias``) so the weights saved in a
checkpoint load into an ordinary ``torch.nn.Sequential`` without rltrainer.

Every policy module also answers RLlib's ModelV2 calls (``ModelV2Calls``):
``model({"obs": rows})`` -> ``(outputs, state)`` and ``model.value_function()`` after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rltrainer.core import compiled
from rltrainer.core.optim import rehome

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU, "linear": nn.Identity}
NUMPY_ACTIVATIONS = {
    "tanh": lambda x: np.tanh(x, out=x),
    "relu": lambda x: np.maximum(x, 0.0, out=x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "linear": lambda x: x,
}
ACTIVATION_FNS = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "elu": torch.nn.functional.elu,
    "silu": torch.nn.functional.silu,
    "linear": lambda x: x,
}


def input_dict_rows(module: nn.Module, input_dict: dict) -> torch.Tensor:
    """``input_dict["obs"]`` (numpy or torch, one observation per row, as
    ``get_preprocessor(space)(space).transform(obs)`` gives them) as float32 rows on
    ``module``'s device."""
    if not isinstance(input_dict, dict) or "obs" not in input_dict:
        raise ValueError("a model call takes an input dict with an 'obs' batch: model({'obs': batch})")
    obs = input_dict["obs"]
    rows = obs if isinstance(obs, torch.Tensor) else torch.from_numpy(np.array(obs, dtype=np.float32))
    device = next(module.parameters()).device
    return rows.reshape(len(rows), -1).to(device=device, dtype=torch.float32)


class ModelV2Calls:
    """RLlib's ModelV2 calls on a policy module (a mixin for ``nn.Module``s whose ``forward``
    takes flat rows and returns ``(dist_inputs, values)``): ``model({"obs": rows}, state,
    seq_lens)`` returns ``(dist_inputs, state)`` (``[]``: no recurrent state) and keeps the
    values for ``value_function()``. The learners call ``forward`` with a tensor, never a dict."""

    _last_values: torch.Tensor | None = None

    def _call_input_dict(self, input_dict: dict, state: Any) -> tuple[torch.Tensor, list]:
        dist_inputs, self._last_values = self.forward(input_dict_rows(self, input_dict))
        return dist_inputs, list(state or [])

    def value_function(self) -> torch.Tensor:
        """The values ``[B]`` of the last ``model({"obs": ...})`` call's batch."""
        if self._last_values is None:
            raise ValueError(
                "value_function() gives the values of the last model({'obs': ...}) call: call it first"
            )
        return self._last_values


def torch_inference(forward: Any, module: nn.Module):
    """``obs (numpy) -> outputs (numpy)`` through ``forward`` on ``module``'s device, without
    autograd: how env runners act with models numpy cannot run (conv stacks, custom models)."""

    @torch.inference_mode()
    def run(obs: np.ndarray) -> np.ndarray:
        device = next(module.parameters()).device
        array = np.ascontiguousarray(obs)
        if not array.flags.writeable:  # e.g. from Ray's object store
            array = array.copy()
        return forward(torch.from_numpy(array).to(device)).float().cpu().numpy()

    return run


class NumpyMLP:
    """The same MLP evaluated with numpy on views of the torch parameters (CPU only).

    For inference on small batches numpy's per-call overhead is a fraction of torch's.
    The arrays share memory with the parameters, so in-place updates (optimizer steps,
    ``load_state_dict``) are seen without any copying or cache invalidation.
    Several ``FastMLP``s run one after the other (e.g. a shared trunk, then a head).
    """

    def __init__(self, *fast: FastMLP, activation: str) -> None:
        self.params = [(w.detach().numpy().T, b.detach().numpy()) for part in fast for w, b in part.params]
        self.tensors = [t for part in fast for pair in part.params for t in pair]
        """The torch parameters viewed (their ``_version`` says when they were written)."""
        self.activate = [flag for part in fast for flag in part.activate]
        self.act = NUMPY_ACTIVATIONS[activation]
        # With numba (rltrainer.core.compiled) one kernel call runs every layer: its arguments.
        self.compiled_args = None
        code, linear = compiled.ACTIVATION_CODES.get(activation), compiled.ACTIVATION_CODES["linear"]
        self.out_size = self.params[-1][0].shape[1]
        if code is not None and all(w.dtype == np.float32 for w, _ in self.params):
            self.compiled_args = (
                tuple(weight_t.T for weight_t, _ in self.params),  # torch's [out, in], C-contiguous
                tuple(bias for _, bias in self.params),
                tuple(code if activate else linear for activate in self.activate),
            )

    def kernels_for(self, x: np.ndarray):
        """The compiled kernels if they should run this MLP on ``x``, else None."""
        if self.compiled_args is None or x.dtype != np.float32:
            return None
        return compiled.for_batch(len(x))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        kernels = self.kernels_for(x)
        if kernels is not None:
            out = np.empty((len(x), self.out_size), dtype=np.float32)
            kernels.mlp_forward(x, *self.compiled_args, out)
            return out
        for (weight_t, bias), activate in zip(self.params, self.activate, strict=True):
            x = x @ weight_t
            x += bias
            if activate:
                x = self.act(x)
        return x


class FastMLP:
    """Runs an ``nn.Sequential`` of Linear/activation layers; same result as ``layers(x)``.

    Calling modules costs tens of microseconds of dispatch per layer, more than the
    matrix products of RL-sized MLPs; one ``addmm`` per layer over the (cached)
    parameter tensors does the same math at a third of the cost, and autograd works
    through it unchanged. Parameters keep their identity under ``load_state_dict`` and
    ``.to(device)``, so the cache stays valid.
    """

    def __init__(self, layers: nn.Sequential, activation: str) -> None:
        linears = [m for m in layers if isinstance(m, nn.Linear)]
        self.params = [(m.weight, m.bias) for m in linears]
        ends_with_activation = not isinstance(layers[-1], nn.Linear)
        self.activate = [True] * (len(linears) - 1) + [ends_with_activation]
        self.act = ACTIVATION_FNS[activation]
        self.activation = activation

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for (weight, bias), activate in zip(self.params, self.activate, strict=True):
            x = torch.addmm(bias, x, weight.t())
            if activate:
                x = self.act(x)
        return x

    # --- hand-written gradients (docs/design/learning.md), called under torch.no_grad() ---
    @property
    def has_backward(self) -> bool:
        """Whether ``backward`` knows this MLP's activation's derivative."""
        return self.activation in _DERIVATIVES

    def forward_saved(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``[x, layer 1's output, ..., the MLP's output]``: what ``backward`` needs (no autograd)."""
        saved = [x]
        for (weight, bias), activate in zip(self.params, self.activate, strict=True):
            x = torch.addmm(bias, x, weight.t())
            if activate:
                x = _IN_PLACE[self.activation](x)
            saved.append(x)
        return saved

    def backward(
        self,
        saved: list[torch.Tensor],
        grad: torch.Tensor,
        param_grads: bool = True,
        input_grad: bool = False,
    ) -> torch.Tensor | None:
        """Backpropagate ``grad`` (d loss / d output, ``[B, out]``) through the layers of the
        ``forward_saved`` call that returned ``saved``. ``param_grads``: write each weight's and
        bias's gradient into its ``.grad`` (overwritten, not accumulated: the gradients must be
        tensors of their own, e.g. ``FlatParameters``' views); returns d loss / d input when
        ``input_grad``."""
        derivative = _DERIVATIVES[self.activation]
        last = len(self.params) - 1
        for i in range(last, -1, -1):
            weight, bias = self.params[i]
            if self.activate[i]:
                grad = derivative(grad, saved[i + 1])
            if param_grads:
                torch.mm(grad.t(), saved[i], out=weight.grad)
                torch.sum(grad, 0, out=bias.grad)
            if i == 0 and not input_grad:
                return None
            # one output (a critic's last layer): the outer product as a broadcast product, the
            # same values at a fraction of a one-term matrix product's cost
            grad = grad * weight if weight.shape[0] == 1 else grad.mm(weight)
        return grad


class TwinMLP:
    """Two ``FastMLP`` of one shape whose parameters (and gradients) lie in one buffer at a fixed
    distance, as TD3's twin critics do in ``FlatParameters`` and ``TargetCopy``, run as one on
    the same input: each layer is one batched product over ``[2, ...]`` strided views of both
    networks' weights (no copies), so the twins cost one network's calls."""

    def __init__(self, first: FastMLP, second: FastMLP) -> None:
        distance = self.distance(
            [t for pair in first.params for t in pair], [t for pair in second.params for t in pair]
        )
        if distance is None:
            raise ValueError("the two MLPs' parameters are not one buffer at a fixed distance")
        self.first, self.activation = first, first.activation
        self.activate = first.activate

        def stacked(t: torch.Tensor) -> torch.Tensor:
            return t.detach().as_strided((2, *t.shape), (distance, *t.stride()))

        self.weights = [stacked(w) for w, _ in first.params]  # [2, out, in]
        self.weights_t = [w.transpose(1, 2) for w in self.weights]  # [2, in, out], views as well
        self.biases = [stacked(b).unsqueeze(1) for _, b in first.params]  # [2, 1, out]
        self.grads: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        grads = [p.grad for pair in first.params for p in pair]
        if all(g is not None for g in grads):
            if self.distance(grads, [p.grad for pair in second.params for p in pair]) != distance:
                raise ValueError("the two MLPs' gradients are not one buffer at their parameters' distance")
            self.grads = [(stacked(w.grad), stacked(b.grad)) for w, b in first.params]

    @staticmethod
    def distance(first: list[torch.Tensor], second: list[torch.Tensor]) -> int | None:
        """The one storage offset from each tensor of ``first`` to its match in ``second`` (one
        storage, contiguous, same shapes), else None."""
        offsets = set()
        for a, b in zip(first, second, strict=True):
            same_storage = a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            if not (same_storage and a.shape == b.shape and a.is_contiguous() and b.is_contiguous()):
                return None
            offsets.add(b.storage_offset() - a.storage_offset())
        return offsets.pop() if len(offsets) == 1 and 0 not in offsets else None

    def forward_saved(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``FastMLP.forward_saved`` of both on ``x`` (``[B, in]``): ``[2, B, ...]`` outputs."""
        x = x.expand(2, *x.shape)
        saved = [x]
        for weight_t, bias, activate in zip(self.weights_t, self.biases, self.activate, strict=True):
            x = torch.baddbmm(bias, x, weight_t)
            if activate:
                x = _IN_PLACE[self.activation](x)
            saved.append(x)
        return saved

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_saved(x)[-1]

    def backward(self, saved: list[torch.Tensor], grad: torch.Tensor) -> None:
        """``FastMLP.backward`` of both (``grad``: ``[2, B, out]``), the parameters' gradients only."""
        if self.grads is None:
            raise ValueError("these MLPs have no gradient buffers")
        derivative = _DERIVATIVES[self.activation]
        for i in range(len(self.weights) - 1, -1, -1):
            if self.activate[i]:
                grad = derivative(grad, saved[i + 1])
            weight_grad, bias_grad = self.grads[i]
            torch.bmm(grad.transpose(1, 2), saved[i], out=weight_grad)
            torch.sum(grad, 1, out=bias_grad)
            if i > 0:  # (one output: a broadcast product, as in FastMLP.backward)
                weight = self.weights[i]
                grad = grad * weight if weight.shape[1] == 1 else grad.bmm(weight)


_threshold_backward = torch.ops.aten.threshold_backward.default  # ReLU's derivative, one kernel
#: Activations applied in place to a layer's fresh output (``FastMLP.forward_saved``).
_IN_PLACE = {"relu": torch.relu_, "tanh": torch.tanh_, "linear": lambda x: x}
#: d loss / d input of an activation from d loss / d output and the activation's output.
_DERIVATIVES = {
    "relu": lambda grad, out: _threshold_backward(grad, out, 0.0),
    "tanh": torch.ops.aten.tanh_backward.default,
    "linear": lambda grad, _out: grad,
}


def mlp(sizes: list[int], activation: str, out_gain: float) -> nn.Sequential:
    """Linear layers with ``activation`` between them, orthogonally initialized.

    Orthogonal init with gain sqrt(2) on hidden layers and a small gain on the output
    follows the PPO implementation details study (Huang et al. 2022) and SB3.
    """
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        linear = nn.Linear(n_in, n_out)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, gain=out_gain if last else np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class ActorCritic(ModelV2Calls, nn.Module):
    """Policy logits (or Gaussian parameters) and a state value from a flat observation.

    With ``vf_share_layers`` one trunk feeds both heads (``trunk``, ``pi``, ``vf``);
    otherwise ``pi`` and ``vf`` are separate MLPs. A Gaussian policy keeps its log
    standard deviation as a free parameter (``log_std``), independent of the state.
    """

    def __init__(
        self,
        obs_size: int,
        num_outputs: int,
        hiddens: list[int],
        activation: str,
        vf_share_layers: bool,
        free_log_std: bool,
    ) -> None:
        super().__init__()
        self.free_log_std = free_log_std
        self.activation = activation
        pi_outputs = num_outputs // 2 if free_log_std else num_outputs
        if vf_share_layers:
            self.trunk = mlp([obs_size, *hiddens], activation, out_gain=np.sqrt(2))
            if hiddens:
                self.trunk.append(ACTIVATIONS[activation]())
            features = hiddens[-1] if hiddens else obs_size
            self.pi = mlp([features, pi_outputs], activation, out_gain=0.01)
            self.vf = mlp([features, 1], activation, out_gain=1.0)
        else:
            self.trunk = None
            self.pi = mlp([obs_size, *hiddens, pi_outputs], activation, out_gain=0.01)
            self.vf = mlp([obs_size, *hiddens, 1], activation, out_gain=1.0)
        if free_log_std:
            self.log_std = nn.Parameter(torch.zeros(pi_outputs))
        self._run_trunk = FastMLP(self.trunk, activation) if self.trunk is not None else None
        self._run_pi = FastMLP(self.pi, activation)
        self._run_vf = FastMLP(self.vf, activation)

    def numpy_policy(self):
        """``flat_obs (numpy) -> dist_inputs (numpy)`` without torch, for CPU inference."""
        parts = [m for m in (self._run_trunk, self._run_pi) if m is not None]
        pi = NumpyMLP(*parts, activation=self.activation)
        if not self.free_log_std:
            return pi  # a NumpyMLP: discrete policies can sample in the same kernel call
        log_std = self.log_std.detach().numpy()

        def dist_inputs(obs: np.ndarray) -> np.ndarray:
            out = pi(obs)
            return np.concatenate([out, np.broadcast_to(log_std, out.shape)], axis=-1)

        return dist_inputs

    def forward(self, obs: torch.Tensor, state: Any = None, seq_lens: Any = None) -> tuple[torch.Tensor, Any]:  # noqa: ARG002
        """``(dist_inputs [B, num_outputs], values [B])`` (RLlib's ``model({"obs": ...})``:
        ``(dist_inputs, state)``, see ``ModelV2Calls``)."""
        if isinstance(obs, dict):
            return self._call_input_dict(obs, state)
        features = self._features(obs)
        dist_inputs = self._run_pi(features)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        return dist_inputs, self._run_vf(features).squeeze(-1)

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """State values only."""
        return self._run_vf(self._features(obs)).squeeze(-1)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        return obs if self._run_trunk is None else self._run_trunk(obs)


class QNetwork(nn.Module):
    """Q-values ``[B, num_actions]`` from a flat observation (DQN), optionally dueling.

    ``trunk`` (the ``fcnet_hiddens`` layers) feeds ``advantage`` (the ``hiddens`` head
    layers, then one output per action); with ``dueling`` a separate ``value`` head gives
    ``Q = V + A - mean(A)`` (Wang et al. 2016, eq. 9). With ``make_encoder`` (a factory of
    modules with ``out_size``: a conv stack, a custom model) the trunk is that encoder instead,
    and env runners act through torch (``torch_inference``).
    """

    def __init__(
        self,
        obs_size: int,
        num_actions: int,
        fcnet_hiddens: list[int],
        hiddens: list[int],
        activation: str,
        dueling: bool,
        make_encoder: Callable[[], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.activation, self.dueling = activation, dueling
        if make_encoder is not None:
            self.trunk = make_encoder()
            features = self.trunk.out_size
            self._run_trunk = self.trunk
        else:
            self.trunk = mlp([obs_size, *fcnet_hiddens], activation, out_gain=np.sqrt(2))
            if fcnet_hiddens:
                self.trunk.append(ACTIVATIONS[activation]())
            features = fcnet_hiddens[-1] if fcnet_hiddens else obs_size
            self._run_trunk = FastMLP(self.trunk, activation) if fcnet_hiddens else None
        self.advantage = mlp([features, *hiddens, num_actions], activation, out_gain=1.0)
        self.value = mlp([features, *hiddens, 1], activation, out_gain=1.0) if dueling else None
        self._run_advantage = FastMLP(self.advantage, activation)
        self._run_value = FastMLP(self.value, activation) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.features(obs))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the heads read: the trunk's output (the rows themselves without ``fcnet_hiddens``)."""
        return obs if self._run_trunk is None else self._run_trunk(obs)

    def q_values(self, features: torch.Tensor) -> torch.Tensor:
        advantages = self._run_advantage(features)
        if not self.dueling:
            return advantages
        return self._run_value(features) + advantages - advantages.mean(-1, keepdim=True)

    def state_value(self, features: torch.Tensor) -> torch.Tensor:
        """``V(s)`` ``[B]``: the dueling value head, or without one the greedy ``max_a Q(s, a)``."""
        if self.dueling:
            return self._run_value(features).squeeze(-1)
        return self.q_values(features).max(-1).values

    def numpy_policy(self):
        """``flat_obs (numpy) -> Q-values (numpy)`` without torch, for CPU inference (through
        torch over an encoder)."""
        if not isinstance(self._run_trunk, FastMLP | None):
            return torch_inference(self.forward, self)
        trunk = NumpyMLP(self._run_trunk, activation=self.activation) if self._run_trunk is not None else None
        advantage = NumpyMLP(self._run_advantage, activation=self.activation)
        value = NumpyMLP(self._run_value, activation=self.activation) if self.dueling else None

        def q_values(obs: np.ndarray) -> np.ndarray:
            features = obs if trunk is None else trunk(obs)
            advantages = advantage(features)
            if value is None:
                return advantages
            return value(features) + advantages - advantages.mean(-1, keepdims=True)

        return q_values


class ContinuousQ(nn.Module):
    """``Q(s, a)`` ``[B]`` for Box actions: an MLP over the concatenated observation (or, with
    ``make_encoder``, its encoder's features: a conv stack, a custom model) and action."""

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hiddens: list[int],
        activation: str,
        make_encoder: Callable[[], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.encoder = make_encoder() if make_encoder is not None else None
        features = self.encoder.out_size if self.encoder is not None else obs_size
        self.net = mlp([features + action_size, *hiddens, 1], activation, out_gain=1.0)
        self._run = FastMLP(self.net, activation)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        features = obs if self.encoder is None else self.encoder(obs)
        return self._run(torch.cat([features, actions], dim=-1)).squeeze(-1)


class PolicyMLP(nn.Module):
    """Distribution inputs from a flat observation (SAC's actor): ``net``, one MLP, over the
    observation or, with ``make_encoder``, its encoder's features."""

    def __init__(
        self,
        obs_size: int,
        num_outputs: int,
        hiddens: list[int],
        activation: str,
        make_encoder: Callable[[], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.activation = activation
        self.encoder = make_encoder() if make_encoder is not None else None
        features = self.encoder.out_size if self.encoder is not None else obs_size
        self.net = mlp([features, *hiddens, num_outputs], activation, out_gain=0.01)
        self._run = FastMLP(self.net, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self._run(obs if self.encoder is None else self.encoder(obs))

    def numpy_policy(self):
        """``flat_obs (numpy) -> dist_inputs (numpy)``: numpy for an MLP, torch over an encoder."""
        if self.encoder is not None:
            return torch_inference(self.forward, self)
        return NumpyMLP(self._run, activation=self.activation)


class TargetCopy:
    """A target network's parameters re-homed into one flat buffer (requires_grad off),
    so hard and soft (Polyak) updates from the online network's flat parameters are one op.

    ``online_flat`` must hold the online network's parameters in the same order.
    """

    def __init__(self, target: nn.Module) -> None:
        params = list(target.parameters())
        for p in params:
            p.requires_grad_(False)
        self.data, _ = rehome(params)  # the layout of the online network's FlatParameters

    @torch.no_grad()
    def update(self, online_flat: torch.Tensor, tau: float) -> None:
        """``target = tau * online + (1 - tau) * target`` (tau=1: a hard copy)."""
        if tau >= 1.0:
            self.data.copy_(online_flat)
        else:
            self.data.lerp_(online_flat, tau)
