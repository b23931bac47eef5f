"""ApexDQN and ApexDQNConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.apex_dqn`` has them
(``from rltrainer.algorithms.apex_dqn import ApexDQN, ApexDQNConfig``): the classes of
``rltrainer.algorithms.apex``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.algorithms.apex import __getattr__  # noqa: F401 - its lazy exports serve this path

if TYPE_CHECKING:
    from rltrainer.algorithms.apex import ApexDQN, ApexDQNConfig

__all__ = ["ApexDQN", "ApexDQNConfig"]
