"""ApexDDPG and ApexDDPGConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.apex_ddpg`` has them
(``from rltrainer.algorithms.apex_ddpg import ApexDDPG, ApexDDPGConfig``): the classes of
``rltrainer.algorithms.apex``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.algorithms.apex import __getattr__  # noqa: F401 - its lazy exports serve this path

if TYPE_CHECKING:
    from rltrainer.algorithms.apex import ApexDDPG, ApexDDPGConfig

__all__ = ["ApexDDPG", "ApexDDPGConfig"]
