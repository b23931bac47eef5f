"""RLlib's new API stack way to act with a trained network: ``algo.get_module()`` or
``RLModule.from_checkpoint(path)``, then ``forward_inference({"obs": ...})`` and the module's
action distribution class (``ray.rllib.core.rl_module.rl_module.RLModule``).

An ``RLModule`` here is a view of a policy: the same torch network the policy acts with (and,
through ``algo.get_module()``, the driver's own policy: ``set_state`` changes what the next
``train()`` trains, as ``get_policy().set_weights()`` does). Like RLlib's, it takes observations
as its network sees them: the observation filter (``observation_filter: MeanStdFilter``) is not
applied; in RLlib the env-to-module connector does that, here ``compute_single_action`` does.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rltrainer.core import DEFAULT_MODULE_ID
from rltrainer.core.columns import Columns

if TYPE_CHECKING:
    from gymnasium import spaces

    from rltrainer.policy.policy import Policy

#: RLlib's checkpoint path of one module: ``<checkpoint>/learner_group/learner/rl_module/<id>``.
_RLLIB_MODULE_PATH = re.compile(r"^(?P<root>.+?)/learner_group/learner/rl_module/(?P<module_id>[^/]+)/?$")


class TorchDistribution:
    """RLlib's ``Distribution`` interface (``from_logits``, ``sample``, ``logp``,
    ``to_deterministic``) over one of rltrainer's action distributions."""

    dist_class: type = object

    def __init__(self, dist: Any) -> None:
        self._dist = dist

    @classmethod
    def from_logits(cls, logits: torch.Tensor, **kwargs: Any) -> TorchDistribution:  # noqa: ARG003
        """The distribution with these inputs (``action_dist_inputs``)."""
        return cls(cls.dist_class(logits))

    def sample(self, **kwargs: Any) -> torch.Tensor:  # noqa: ARG002 - RLlib's sample_shape
        return self._dist.sample()

    def logp(self, value: torch.Tensor) -> torch.Tensor:
        return self._dist.log_prob(value)

    def entropy(self) -> torch.Tensor:
        return self._dist.entropy()

    def kl(self, other: TorchDistribution) -> torch.Tensor:
        return self._dist.kl(other._dist)

    def to_deterministic(self) -> TorchDeterministic:
        """The distribution that always gives this one's most likely action (greedy)."""
        return TorchDeterministic(self._dist.deterministic_sample())


class TorchDeterministic:
    """A point mass at one action per row (RLlib's ``TorchDeterministic``)."""

    def __init__(self, loc: torch.Tensor) -> None:
        self.loc = loc

    def sample(self, **kwargs: Any) -> torch.Tensor:  # noqa: ARG002 - RLlib's sample_shape
        return self.loc


@functools.cache
def torch_distribution(dist_class: type) -> type[TorchDistribution]:
    """``TorchCategorical``, ``TorchDiagGaussian``, ...: the ``TorchDistribution`` of one of
    rltrainer's distribution classes (one class per distribution class)."""
    name = "Torch" + dist_class.__name__.lstrip("_")
    return type(name, (TorchDistribution,), {"dist_class": dist_class, "__module__": __name__})


class RLModule:
    """A policy's network with RLlib's ``RLModule`` forward methods.

    ``forward_inference``, ``forward_exploration`` and ``forward_train`` take
    ``{"obs": [B, ...]}`` (torch tensors or numpy arrays; a Dict or Tuple space's structure of
    them) and return ``{"action_dist_inputs": [B, n]}`` (``forward_train`` also ``vf_preds``
    where the network has a value head); ``get_inference_action_dist_cls().from_logits(...)``
    turns those into actions. Recurrent (LSTM) policies are refused: they act with
    ``compute_single_action(obs, state=...)``.
    """

    framework = "torch"

    def __init__(self, policy: Policy, module_id: str = DEFAULT_MODULE_ID) -> None:
        self.policy = policy
        self.module_id = module_id

    # --- what it is ----------------------------------------------------------------------
    @property
    def observation_space(self) -> spaces.Space:
        return self.policy.observation_space

    @property
    def action_space(self) -> spaces.Space:
        return self.policy.action_space

    @property
    def model(self) -> torch.nn.Module:
        """The torch network itself (the policy's ``model``)."""
        return self.policy.model

    @property
    def unwrapped(self) -> RLModule:
        return self

    def is_stateful(self) -> bool:
        return self.policy.recurrent

    def parameters(self) -> Any:
        return self.model.parameters()

    def __repr__(self) -> str:
        return f"RLModule({self.module_id!r}, {type(self.policy).__name__}, {self.action_space})"

    # --- forward passes ------------------------------------------------------------------
    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, torch.Tensor]:  # noqa: ARG002
        """The action distribution's inputs for acting greedily (no gradients)."""
        with torch.no_grad():
            return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(batch)}

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, torch.Tensor]:  # noqa: ARG002
        """The action distribution's inputs for exploring (the same network; no gradients)."""
        with torch.no_grad():
            return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(batch)}

    def forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, torch.Tensor]:  # noqa: ARG002
        """The distribution's inputs and, with a value head, ``vf_preds``, with gradients."""
        flat = self._flat_obs(batch)
        out = {Columns.ACTION_DIST_INPUTS: self.policy.torch_dist_inputs(flat)}
        if hasattr(self.model, "values"):
            out[Columns.VF_PREDS] = self.model.values(flat)
        return out

    def compute_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """State values ``[B]`` of the batch's observations (a network with a value head)."""
        if not hasattr(self.model, "values"):
            raise TypeError(f"{type(self.policy).__name__}'s network has no value head")
        return self.model.values(self._flat_obs(batch))

    def _dist_inputs(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.policy.torch_dist_inputs(self._flat_obs(batch))

    def _flat_obs(self, batch: dict[str, Any]) -> torch.Tensor:
        """``batch["obs"]`` as the network's input: float32 ``[B, size]`` on its device."""
        if self.policy.recurrent:
            raise ValueError(
                f"module {self.module_id!r} is recurrent (an LSTM): act with "
                "compute_single_action(obs, state=..., policy_id=...), which carries its state"
            )
        if not isinstance(batch, dict) or Columns.OBS not in batch:
            raise ValueError(f'forward passes take {{"obs": a batch of observations}}, got {_kind(batch)}')
        obs = batch[Columns.OBS]
        size = self.policy.preprocessor.size
        device = next(self.model.parameters()).device
        if torch.is_tensor(obs) and obs.dim() == 2 and obs.shape[1] == size and obs.is_floating_point():
            return obs.to(device=device, dtype=torch.float32)
        try:
            flat = self.policy.preprocessor.transform(_numpy(obs))
        except (ValueError, TypeError, KeyError, IndexError) as err:
            raise ValueError(self._shape_message(obs, err)) from None
        if flat.ndim != 2 or flat.shape[1] != size:
            raise ValueError(self._shape_message(obs, None))
        return torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32)).to(device)

    def _shape_message(self, obs: Any, err: Exception | None) -> str:
        reason = f" ({err})" if err else ""
        return (
            f'batch["obs"] of shape {_shape(obs)} does not fit {self.observation_space}: give a '
            f"batch with a leading batch axis, e.g. torch.from_numpy(obs).unsqueeze(0){reason}"
        )

    # --- action distributions ------------------------------------------------------------
    def get_inference_action_dist_cls(self) -> type[TorchDistribution]:
        return torch_distribution(self.policy.dist_class)

    get_exploration_action_dist_cls = get_inference_action_dist_cls
    get_train_action_dist_cls = get_inference_action_dist_cls

    # --- state ---------------------------------------------------------------------------
    def get_state(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:  # noqa: ARG002 - RLlib's filters
        """The network's parameters as numpy arrays, by name (the policy's ``get_weights()``)."""
        return self.policy.get_weights()

    def set_state(self, state: dict[str, Any]) -> None:
        """Load parameters (numpy arrays or tensors, by name). Through ``algo.get_module()``
        they reach the learners and env runners before the next ``train()`` samples."""
        self.policy.set_weights(state)

    def get_initial_state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_checkpoint(
        cls, path: Any, module_id: str | None = None, storage_options: dict[str, Any] | None = None
    ) -> RLModule:
        """A checkpoint's module, without building the algorithm: ``path`` is an rltrainer
        checkpoint (a folder, ``s3://`` URI or Tune checkpoint), or RLlib's path of one module
        in it, ``<checkpoint>/learner_group/learner/rl_module/<module id>``. A multi-agent
        checkpoint needs ``module_id`` (or that path)."""
        from rltrainer.policy.policy import Policy

        where = str(getattr(path, "path", path))
        rllib_path = _RLLIB_MODULE_PATH.match(where.replace("\\", "/"))
        if rllib_path is not None:
            where, module_id = rllib_path["root"], module_id or rllib_path["module_id"]
        loaded = Policy.from_checkpoint(where, storage_options=storage_options, policy_id=module_id)
        if isinstance(loaded, dict):  # multi-agent without an id
            raise ValueError(
                f"checkpoint {where!r} holds the modules {sorted(loaded)}: name one "
                "(RLModule.from_checkpoint(path, module_id=...))"
            )
        return cls(loaded, module_id or DEFAULT_MODULE_ID)


def _numpy(obs: Any) -> Any:
    """Tensors (also inside dicts, tuples and lists) as numpy arrays."""
    if torch.is_tensor(obs):
        return obs.detach().cpu().numpy()
    if isinstance(obs, dict):
        return {key: _numpy(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_numpy(value) for value in obs)
    return obs


def _shape(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: _shape(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_shape(value) for value in obs)
    return tuple(getattr(obs, "shape", np.shape(obs)))


def _kind(batch: Any) -> str:
    if isinstance(batch, dict):
        return f"a dict with keys {sorted(map(str, batch))}"
    return f"a {type(batch).__name__}"
