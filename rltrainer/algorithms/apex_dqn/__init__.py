"""ApexDQN and ApexDQNConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.apex_dqn`` has them
(``from rltrainer.algorithms.apex_dqn import ApexDQN, ApexDQNConfig``): the classes of
``rltrainer.algorithms.apex``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.apex.apex import ApexDQN
    from rltrainer.algorithms.apex.apex_config import ApexDQNConfig

__all__ = ["ApexDQN", "ApexDQNConfig"]
__getattr__ = lazy_exports(
    __name__,
    {"ApexDQN": "rltrainer.algorithms.apex.apex", "ApexDQNConfig": "rltrainer.algorithms.apex.apex_config"},
)
