"""Ape-X DQN and DDPG (``from rltrainer.algorithms.apex import ApexDQN, ApexDQNConfig``).

Imported on first use: the algorithms import torch, the configs (in ``apex_config``) do not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.apex.apex import ApexDDPG, ApexDQN
    from rltrainer.algorithms.apex.apex_config import ApexDDPGConfig, ApexDQNConfig

__all__ = ["ApexDDPG", "ApexDDPGConfig", "ApexDQN", "ApexDQNConfig"]
__getattr__ = lazy_exports(
    __name__,
    {
        "ApexDQN": "rltrainer.algorithms.apex.apex",
        "ApexDDPG": "rltrainer.algorithms.apex.apex",
        "ApexDQNConfig": "rltrainer.algorithms.apex.apex_config",
        "ApexDDPGConfig": "rltrainer.algorithms.apex.apex_config",
    },
)
