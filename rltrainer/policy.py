"""``Policy``: the model, its action distribution, and the mapping to env actions."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core.action_masks import valid_actions
from rltrainer.core.distributions import ActionDistribution, Categorical, dist_class_for
from rltrainer.core.exploration import Exploration, StochasticSampling, make_exploration
from rltrainer.core.models import ActorCritic, NumpyMLP
from rltrainer.env.preprocessors import Preprocessor
from rltrainer.errors import ConfigError


def as_tensor(value: Any) -> torch.Tensor:
    """A tensor from a tensor or array; arrays are copied (Ray's object store hands out read-only ones)."""
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))


class Policy:
    """Computes actions from flat observations; holds the torch ``model`` and ``dist_class``.

    For Box actions with ``normalize_actions`` the distribution lives in [-1, 1] and
    ``to_env_actions`` rescales to the space's bounds (RLlib's unsquashing).

    Algorithms supply their own policy by subclassing (``Algorithm.policy_class``) and
    overriding ``make_model`` (the torch module the learner trains; its ``numpy_policy()``
    maps observations to distribution inputs) and ``make_dist_class``. Actions come from the
    ``exploration`` object built from the config's ``exploration_config``.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: Any,
        seed: int | None = None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.preprocessor = Preprocessor(observation_space)
        self.dist_class = self.make_dist_class()
        self._mask_columns = self.action_mask_columns()  # before make_model, which masks with them
        self.model = self.make_model()
        self._rescale = self._action_rescaler(action_space, config)
        self.rng = np.random.default_rng(seed)
        try:
            self.exploration: Exploration = make_exploration(
                config.exploration_config, self.policy_action_space(), self.rng
            )
        except ValueError as err:
            raise ConfigError(f"exploration_config {config.exploration_config}: {err}") from None
        self.global_timestep = 0
        """Env steps sampled so far, as the exploration schedules see them (synced by the algorithm)."""
        # Inference runs in numpy on views of the parameters (see NumpyMLP): env runners keep
        # their policy on the CPU, where this beats torch for RL-sized networks.
        self._set_numpy_policy(self.model.numpy_policy())

    # --- what subclasses override ------------------------------------------------------
    def make_dist_class(self) -> type:
        """The action distribution class over the network's outputs."""
        return dist_class_for(self.action_space)

    def make_model(self) -> torch.nn.Module:
        """The module the learner trains and env runners act with (PPO): a custom model's
        ``CustomActorCritic``, an ``EncoderActorCritic`` over a conv stack for image
        observations, else the ``ActorCritic`` MLP; masked (``MaskedActorCritic``) when the
        observation holds an action mask."""
        model = self.make_unmasked_model()
        if self._mask_columns is None:
            return model
        from rltrainer.core.action_masks import MaskedActorCritic

        return MaskedActorCritic(model, self._mask_columns)

    def action_mask_columns(self) -> slice | None:
        """The action mask's columns in the observation row (``None``: no mask)."""
        from rltrainer.core.action_masks import mask_columns

        return mask_columns(self.observation_space, self.action_space, self.config.model.action_mask_key)

    def make_unmasked_model(self) -> torch.nn.Module:
        model = self.config.model
        num_outputs = self.dist_class.required_inputs(self.action_space)
        free_log_std = isinstance(self.action_space, spaces.Box) and model.free_log_std
        if model.custom_model is not None:
            from rltrainer.models.torch.adapter import CustomActorCritic

            return CustomActorCritic(
                self.observation_space, self.action_space, self.preprocessor.size, num_outputs, model
            )
        encoder = self.make_encoder()
        if encoder is not None:
            from rltrainer.core.encoders import EncoderActorCritic

            return EncoderActorCritic(encoder, num_outputs, model.vf_share_layers, free_log_std)
        return ActorCritic(
            obs_size=self.preprocessor.size,
            num_outputs=num_outputs,
            hiddens=list(model.fcnet_hiddens),
            activation=model.fcnet_activation,
            vf_share_layers=model.vf_share_layers,
            free_log_std=free_log_std,
        )

    def make_encoder(self) -> Any:
        """A factory of encoder modules for observations the MLP does not read (image frames:
        ``ConvEncoder``), or ``None`` for flat observations."""
        from rltrainer.models.conv_filters import conv_layers, is_image_space

        if not is_image_space(self.observation_space):
            return None
        model = self.config.model
        conv_layers(self.observation_space, model.conv_filters)  # ConfigError before any module is built

        def conv_encoder() -> torch.nn.Module:
            from rltrainer.core.encoders import ConvEncoder

            return ConvEncoder(
                self.observation_space,
                model.conv_filters,
                model.conv_activation,
                list(model.post_fcnet_hiddens),
                model.post_fcnet_activation,
            )

        return conv_encoder

    def extra_fetches(self, flat_obs: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What ``compute_single_action(full_fetch=True)`` returns besides the action."""
        return {
            "action_logp": out["action_logp"],
            "action_dist_inputs": out["action_dist_inputs"],
            "vf_preds": self.compute_values(flat_obs),
        }

    # --- inference -------------------------------------------------------------------
    def policy_action_space(self) -> spaces.Space:
        """The space the distribution's actions live in: [-1, 1] for normalized Box actions."""
        space = self.action_space
        if not isinstance(space, spaces.Box) or not self.config.normalize_actions:
            return space
        if np.isfinite(space.low).all() and np.isfinite(space.high).all():
            return spaces.Box(-1.0, 1.0, shape=space.shape, dtype=np.float32)
        return space

    def compute(self, flat_obs: np.ndarray, explore: bool) -> dict[str, np.ndarray]:
        """Actions for ``[B, obs_size]`` observations.

        Returns ``actions`` (the distribution's samples, what the learner sees),
        ``env_actions`` (rescaled/clipped for the env), ``action_logp`` and
        ``action_dist_inputs``, all numpy.
        """
        timestep = self.global_timestep
        if self._samples_from_mlp and (not explore or timestep >= self.exploration.random_timesteps):
            # What StochasticSampling does, with the network and the sampling in one compiled
            # call where possible (the env runners' hot path).
            mlp, rng = self._numpy_policy, self.rng
            actions, logp, dist_inputs = Categorical.sample_mlp(mlp, flat_obs, explore, rng)
        else:
            dist_inputs = self._numpy_policy(flat_obs)
            distribution = ActionDistribution(self.dist_class, dist_inputs, self.rng)
            if self._mask_columns is not None:  # random actions of exploration draw among these
                distribution.valid = valid_actions(flat_obs, self._mask_columns)
            actions, logp = self.exploration.get_exploration_action(distribution, timestep, explore)
        return {
            "actions": actions,
            "env_actions": self.to_env_actions(actions),
            "action_logp": logp,
            "action_dist_inputs": dist_inputs,
        }

    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: Any = None,  # noqa: ARG002 - RLlib's signature; no RNN here
        prev_action_batch: Any = None,  # noqa: ARG002
        prev_reward_batch: Any = None,  # noqa: ARG002
        info_batch: Any = None,  # noqa: ARG002
        episodes: Any = None,  # noqa: ARG002
        explore: bool | None = None,
        timestep: int | None = None,
        **kwargs: Any,  # noqa: ARG002
    ) -> tuple[np.ndarray, list[Any], dict[str, np.ndarray]]:
        """RLlib's ``Policy.compute_actions``: ``(actions, state_outs, extra_fetches)`` for a batch
        of preprocessed (flattened, filtered) observations; ``actions`` are the distribution's
        (before rescaling to a Box space's bounds), ``state_outs`` is ``[]`` (no RNN),
        ``extra_fetches`` holds ``action_logp``, ``action_dist_inputs`` and ``vf_preds``
        (per algorithm). ``explore`` defaults to the config's, ``timestep`` to the policy's."""
        flat = np.asarray(obs_batch, dtype=np.float32)
        flat = flat.reshape(len(flat), -1)
        if timestep is not None:
            self.global_timestep = int(timestep)
        out = self.compute(flat, self.config.explore if explore is None else explore)
        return out["actions"], [], self.extra_fetches(flat, out)

    @torch.inference_mode()
    def compute_values(self, flat_obs: np.ndarray) -> np.ndarray:
        """State values of ``[B, obs_size]`` observations."""
        device = next(self.model.parameters()).device
        return self.model.values(torch.from_numpy(flat_obs).to(device)).cpu().numpy()

    def to_env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Policy outputs -> actions the env accepts (rescaled / clipped for Box spaces)."""
        return self._rescale(actions) if self._rescale is not None else actions

    # --- weights -----------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's parameters as numpy arrays, by name."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def share_model(self, model: torch.nn.Module) -> None:
        """Act with ``model`` itself (e.g. the driver's learner's module on the CPU): the numpy
        inference views its parameters, so every optimizer step is seen without syncing."""
        self.model = model
        self._set_numpy_policy(model.numpy_policy())

    def _set_numpy_policy(self, numpy_policy: Any) -> None:
        self._numpy_policy = numpy_policy
        self._samples_from_mlp = (
            type(self.exploration) is StochasticSampling
            and self.dist_class is Categorical
            and isinstance(numpy_policy, NumpyMLP)
        )

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load parameters given as numpy arrays or tensors, by name (all, or a subset)."""
        _, unexpected = self.model.load_state_dict(
            {k: as_tensor(v) for k, v in weights.items()}, strict=False
        )
        if unexpected:
            raise KeyError(f"weights for parameters this policy does not have: {unexpected}")

    @staticmethod
    def _action_rescaler(space: spaces.Space, config: Any):
        if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
            # The distribution's [B, d] columns from 0 -> the space's shape (and MultiDiscrete's start)
            start = np.asarray(getattr(space, "start", 0)).reshape(-1)  # MultiBinary has none: 0
            return lambda a: (a + start).reshape(len(a), *space.shape).astype(space.dtype)
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
