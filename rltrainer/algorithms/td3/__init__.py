"""TD3 and TD3Config where RLlib 2.0-2.7's ``ray.rllib.algorithms.td3`` has them
(``from rltrainer.algorithms.td3 import TD3, TD3Config``): the classes of
``rltrainer.algorithms.ddpg``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.algorithms.ddpg import __getattr__  # noqa: F401 - its lazy exports serve this path

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg import TD3, TD3Config

__all__ = ["TD3", "TD3Config"]
