"""``Policy``: the model, its action distribution, and the mapping to env actions."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core.distributions import dist_class_for
from rltrainer.core.models import ActorCritic
from rltrainer.env.preprocessors import Preprocessor


class Policy:
    """Computes actions from flat observations; holds the torch ``model`` and ``dist_class``.

    For Box actions with ``normalize_actions`` the distribution lives in [-1, 1] and
    ``to_env_actions`` rescales to the space's bounds (RLlib's unsquashing).
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, config: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.preprocessor = Preprocessor(observation_space)
        self.dist_class = dist_class_for(action_space)
        model = config.model
        self.model = ActorCritic(
            obs_size=self.preprocessor.size,
            num_outputs=self.dist_class.required_inputs(action_space),
            hiddens=list(model.fcnet_hiddens),
            activation=model.fcnet_activation,
            vf_share_layers=model.vf_share_layers,
            free_log_std=isinstance(action_space, spaces.Box),
        )
        self._rescale = self._action_rescaler(action_space, config)

    # --- inference -------------------------------------------------------------------
    @torch.inference_mode()
    def compute(self, flat_obs: np.ndarray, explore: bool) -> dict[str, np.ndarray]:
        """Actions for ``[B, obs_size]`` observations: raw actions, env actions, logp, values.

        ``action_dist_inputs`` stays a tensor (only ``full_fetch`` callers convert it).
        """
        dist_inputs, values = self.model(torch.from_numpy(flat_obs))
        dist = self.dist_class(dist_inputs)
        actions = dist.sample() if explore else dist.deterministic_sample()
        raw = actions.numpy()
        return {
            "actions": raw,
            "env_actions": self.to_env_actions(raw),
            "action_logp": dist.log_prob(actions).numpy(),
            "vf_preds": values.numpy(),
            "action_dist_inputs": dist_inputs,
        }

    @torch.inference_mode()
    def compute_values(self, flat_obs: np.ndarray) -> np.ndarray:
        """State values of ``[B, obs_size]`` observations."""
        return self.model.values(torch.from_numpy(flat_obs)).numpy()

    def to_env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Policy outputs -> actions the env accepts (rescaled / clipped for Box spaces)."""
        return self._rescale(actions) if self._rescale is not None else actions

    # --- weights -----------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's parameters as numpy arrays, by name."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load parameters given as numpy arrays or tensors, by name."""
        state = {k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()}
        self.model.load_state_dict(state)

    @staticmethod
    def _action_rescaler(space: spaces.Space, config: Any):
        if not isinstance(space, spaces.Box):
            return None
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
        if config.normalize_actions and bounded:
            def rescale(a: np.ndarray) -> np.ndarray:
                return low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
            return rescale
        if config.clip_actions:
            return lambda a: np.clip(a, low, high)
        return None
