"""Proximal Policy Optimization: config, rollout postprocessing, and the training step."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOBatch, PPOLearner
from rltrainer.env.env_runner import Rollout
from rltrainer.errors import ConfigError
from rltrainer.utils.postprocessing import compute_gae


class PPOConfig(AlgorithmConfig):
    """PPO's settings; defaults follow RLlib's PPO."""

    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + ("lambda_", "clip_param", "vf_clip_param", "vf_loss_coeff", "entropy_coeff",
           "kl_coeff", "kl_target", "num_epochs", "minibatch_size", "use_gae"),
    }

    lr: float | list[tuple[int, float]] = 5e-5
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    lambda_: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda: 1 is Monte-Carlo advantages, 0 one-step TD."""
    clip_param: float = Field(0.3, gt=0)
    """PPO's surrogate clipping epsilon."""
    vf_clip_param: float = Field(10.0, gt=0)
    """Each squared value error is clipped at this (keep it near the scale of returns squared)."""
    vf_loss_coeff: float = Field(1.0, ge=0)
    """Weight of the value loss."""
    entropy_coeff: float = Field(0.0, ge=0)
    """Weight of the entropy bonus."""
    kl_coeff: float = Field(0.2, ge=0)
    """Initial coefficient of the adaptive KL penalty (0 disables it)."""
    kl_target: float = Field(0.01, gt=0)
    """KL the adaptive coefficient steers towards."""
    num_epochs: int = Field(30, ge=1)
    """Passes of minibatch SGD over each train batch."""
    minibatch_size: int = Field(128, ge=1)
    """Samples per gradient step."""
    use_gae: bool = True
    """Generalized advantage estimation; ``False`` uses Monte-Carlo returns minus the baseline."""

    def __init__(self, algo_class: type | None = None, **data: Any) -> None:
        super().__init__(algo_class or PPO, **data)

    def validate(self) -> None:
        super().validate()
        if self.minibatch_size > self.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({self.minibatch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}): lower minibatch_size or raise train_batch_size"
            )


def compute_advantages(rollout: Rollout, config: PPOConfig) -> PPOBatch:
    """GAE over the rollout's ``[T, N]`` arrays, then the valid steps flattened into a batch."""
    advantages, value_targets = compute_gae(
        rewards=rollout.rewards,
        values=rollout.vf_preds,
        terminateds=rollout.terminateds.astype(np.float32),
        dones=(rollout.terminateds | rollout.truncateds).astype(np.float32),
        last_values=rollout.last_values,
        gamma=config.gamma,
        lambda_=config.lambda_ if config.use_gae else 1.0,
    )
    valid = rollout.valid
    return PPOBatch(
        obs=rollout.obs[valid],
        actions=rollout.actions[valid],
        action_logp=rollout.action_logp[valid],
        vf_preds=rollout.vf_preds[valid],
        advantages=advantages[valid],
        value_targets=value_targets[valid],
    )


class PPO(Algorithm):
    """PPO: sample with the env runners, run minibatch SGD epochs, sync weights."""

    config_class = PPOConfig
    learner_class = PPOLearner
    postprocess_rollout = staticmethod(compute_advantages)

    def training_step(self) -> dict[str, float]:
        batch = self.sample_train_batch()  # 1. sample
        stats = self.learner_group.update(batch, timestep=self.counters.timesteps_total)  # 2. update
        self.env_runner_group.sync_weights(self.learner_group.get_weights())  # 3. sync weights
        self.counters.num_env_steps_trained += len(batch.obs)
        return stats
