"""PPO (``from rltrainer.algorithms.ppo import PPO, PPOConfig``)."""

from rltrainer.algorithms.ppo.ppo import PPO, PPOConfig

__all__ = ["PPO", "PPOConfig"]
