"""ApexDDPG and ApexDDPGConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.apex_ddpg`` has them
(``from rltrainer.algorithms.apex_ddpg import ApexDDPG, ApexDDPGConfig``): the classes of
``rltrainer.algorithms.apex``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.apex.apex import ApexDDPG
    from rltrainer.algorithms.apex.apex_config import ApexDDPGConfig

__all__ = ["ApexDDPG", "ApexDDPGConfig"]
__getattr__ = lazy_exports(
    __name__,
    {"ApexDDPG": "rltrainer.algorithms.apex.apex", "ApexDDPGConfig": "rltrainer.algorithms.apex.apex_config"},
)
