"""PPO (``from rltrainer.algorithms.ppo import PPO, PPOConfig``).

Imported on first use: ``PPO`` imports torch, ``PPOConfig`` (in ``ppo_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ppo.ppo import PPO
    from rltrainer.algorithms.ppo.ppo_config import PPOConfig

__all__ = ["PPO", "PPOConfig"]
__getattr__ = lazy_exports(
    __name__, {"PPO": "rltrainer.algorithms.ppo.ppo", "PPOConfig": "rltrainer.algorithms.ppo.ppo_config"}
)
