"""DDPG and TD3 (``from rltrainer.algorithms.ddpg import DDPG, DDPGConfig, TD3, TD3Config``).

Imported on first use: the algorithms import torch, the configs (in ``ddpg_config``) do not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg.ddpg import DDPG, TD3
    from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig, TD3Config

__all__ = ["DDPG", "TD3", "DDPGConfig", "TD3Config"]
_ALGORITHMS, _CONFIGS = "rltrainer.algorithms.ddpg.ddpg", "rltrainer.algorithms.ddpg.ddpg_config"
__getattr__ = lazy_exports(
    __name__, {"DDPG": _ALGORITHMS, "TD3": _ALGORITHMS, "DDPGConfig": _CONFIGS, "TD3Config": _CONFIGS}
)
