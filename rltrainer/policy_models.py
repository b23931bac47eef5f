"""The networks a ``Policy`` acts and learns with, and its action distribution: the methods
algorithms override (``make_model``, ``make_dist_class``, ...), with the defaults every
algorithm starts from (an MLP ``ActorCritic``; a conv or Dict/Tuple encoder for image and
mixed observations; an LSTM with ``use_lstm``; a custom model; action masking).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core.dist_class import dist_class_for
from rltrainer.core.models import ActorCritic
from rltrainer.errors import ConfigError


class PolicyModels:
    """``Policy``'s model-building methods (``Policy`` inherits them; its ``__init__`` calls
    ``make_dist_class``, ``action_mask_columns`` and ``make_model`` in that order)."""

    action_space: Any
    observation_space: Any
    config: Any
    preprocessor: Any
    composite_actions: Any
    _mask_columns: slice | None

    # --- what subclasses override ------------------------------------------------------
    def make_dist_class(self) -> type:
        """The action distribution class over the network's outputs."""
        return dist_class_for(self.action_space)

    def make_model(self) -> torch.nn.Module:
        """The module the learner trains and env runners act with (PPO): a custom model's
        ``CustomActorCritic``, an ``EncoderActorCritic`` over a conv stack for image
        observations, else the ``ActorCritic`` MLP; masked (``MaskedActorCritic``) when the
        observation holds an action mask."""
        if self.config.model.use_lstm:
            return self.make_recurrent_model()  # masks its logits itself (they are [B, L, n] in training)
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

    def make_recurrent_model(self) -> torch.nn.Module:
        """``use_lstm``: the encoder (MLP, or conv stack for images) under an LSTM
        (``RecurrentActorCritic``)."""
        from rltrainer.core.recurrent import MLPEncoder, RecurrentActorCritic

        model = self.config.model
        if model.custom_model is not None:
            raise ConfigError(
                "model.use_lstm wraps the built-in encoders; a custom_model keeps its own state: "
                "remove use_lstm or custom_model"
            )
        make_encoder = self.make_encoder()
        if make_encoder is None:

            def make_encoder() -> torch.nn.Module:
                return MLPEncoder(self.preprocessor.size, list(model.fcnet_hiddens), model.fcnet_activation)

        return RecurrentActorCritic(
            make_encoder(),
            self.action_space,
            self.dist_class.required_inputs(self.action_space),
            model.lstm_cell_size,
            model.lstm_use_prev_action,
            model.lstm_use_prev_reward,
            free_log_std=isinstance(self.action_space, spaces.Box) and model.free_log_std,
            mask_columns=self._mask_columns,
            # the value function's own encoder and LSTM unless it shares the policy's
            vf_encoder=None if model.vf_share_layers else make_encoder(),
        )

    def make_feature_encoder(self) -> Any:
        """A factory of encoders for algorithms that put their own heads on the features (DQN's
        Q head, SAC's actor and critics): the custom model's outputs (``CustomEncoder``), else
        ``make_encoder()``'s (``None``: the heads read the flat observation)."""
        model = self.config.model
        if model.custom_model is None:
            return self.make_encoder()
        from functools import partial

        from rltrainer.models.torch.adapter import CustomEncoder

        size = self.preprocessor.size
        return partial(CustomEncoder, self.observation_space, self.action_space, size, model)

    def make_encoder(self) -> Any:
        """A factory of encoder modules for observations the MLP does not read (image frames:
        ``ConvEncoder``; Dict/Tuple spaces holding images: ``ComplexEncoder``), or ``None`` for
        flat observations."""
        from rltrainer.models.conv_filters import conv_layers, image_parts, is_image_space

        model = self.config.model
        images = image_parts(self.observation_space)
        if images:
            for path, image in images:  # ConfigError before any module is built, naming the part
                try:
                    conv_layers(image, model.conv_filters)
                except ConfigError as err:
                    raise ConfigError(f"observation part {path!r} {image}: {err}") from None

            def complex_encoder() -> torch.nn.Module:
                from rltrainer.core.encoders import ComplexEncoder

                return ComplexEncoder(self.observation_space, model)

            return complex_encoder
        if not is_image_space(self.observation_space):
            return None
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

    #: Whether the model has a state-value head (``vf_preds`` in the extra fetches): PPO's.
    has_value_function = True

    def extra_fetches(self, flat_obs: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What ``compute_single_action(full_fetch=True)`` returns besides the action."""
        fetches = {"action_logp": out["action_logp"], "action_dist_inputs": out["action_dist_inputs"]}
        if self.has_value_function:
            fetches["vf_preds"] = out["vf_preds"] if "vf_preds" in out else self.compute_values(flat_obs)
        return fetches
