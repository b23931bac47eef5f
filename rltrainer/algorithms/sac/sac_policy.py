"""SAC's policy: the squashed-Gaussian or categorical actor and the twin critics (its own
module, so that env runners and learners load it without the algorithm, and so without Ray Tune)."""

from __future__ import annotations

import torch
from gymnasium import spaces

from rltrainer.algorithms.sac.sac_learner import SACModule
from rltrainer.core.distributions import Categorical, SquashedGaussian
from rltrainer.errors import ConfigError
from rltrainer.policy.policy import Policy


class SACPolicy(Policy):
    """The actor: a squashed Gaussian over [-1, 1] (Box) or a categorical (Discrete)."""

    has_value_function = False

    def make_dist_class(self) -> type:
        if isinstance(self.action_space, spaces.Discrete):
            return Categorical
        if isinstance(self.action_space, spaces.Box) and len(self.action_space.shape) == 1:
            if not self.config.normalize_actions:
                raise ConfigError("SAC's squashed Gaussian acts in [-1, 1]: keep normalize_actions=True")
            return SquashedGaussian
        raise ConfigError(f"SAC needs a Discrete or a 1-D Box action space, got {self.action_space}")

    def make_model(self) -> SACModule:
        """The actor and critics: MLPs (``policy_model_config``, ``q_model_config``) over the
        flat observation, or over their own encoder each: a conv stack for images (``model``'s
        ``conv_filters``, ``conv_activation``, ``post_fcnet_hiddens``; ``ComplexEncoder`` for
        Dict/Tuple spaces holding images) or a custom model's outputs (``model.custom_model``)."""
        cfg, space = self.config, self.action_space
        if self._mask_columns is not None:
            raise ConfigError(
                "SAC has no action masks yet (a masked categorical's entropy target would need the "
                "allowed count per state); use PPO or DQN for masked actions"
            )
        encoder = self.make_feature_encoder()
        discrete = isinstance(space, spaces.Discrete)
        return SACModule(
            obs_size=self.preprocessor.size,
            num_actions=int(space.n) if discrete else None,
            action_size=0 if discrete else int(space.shape[0]),
            policy_model=cfg.policy_model_config,
            q_model=cfg.q_model_config,
            twin_q=cfg.twin_q,
            initial_alpha=cfg.initial_alpha,
            make_encoder=encoder,
        )

    def torch_dist_inputs(self, flat_obs: torch.Tensor) -> torch.Tensor:
        return self.model.pi(flat_obs)  # the actor's
