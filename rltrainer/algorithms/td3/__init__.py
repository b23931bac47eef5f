"""TD3 and TD3Config where RLlib 2.0-2.7's ``ray.rllib.algorithms.td3`` has them
(``from rltrainer.algorithms.td3 import TD3, TD3Config``): the classes of
``rltrainer.algorithms.ddpg``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg.ddpg import TD3
    from rltrainer.algorithms.ddpg.ddpg_config import TD3Config

__all__ = ["TD3", "TD3Config"]
__getattr__ = lazy_exports(
    __name__, {"TD3": "rltrainer.algorithms.ddpg.ddpg", "TD3Config": "rltrainer.algorithms.ddpg.ddpg_config"}
)
