"""Trainer-era PPO (``from rltrainer.agents.ppo import PPOTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.ppo`` (``PPOTrainer`` is ``PPO``; ``DEFAULT_CONFIG`` is ``PPOConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ppo.ppo import PPO
    from rltrainer.algorithms.ppo.ppo import PPO as PPOTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.ppo.ppo_config import PPOConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "PPO", "PPOConfig", "PPOTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.ppo.ppo:PPO", "rltrainer.algorithms.ppo.ppo_config:PPOConfig"
)
