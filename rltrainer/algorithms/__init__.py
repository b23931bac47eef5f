"""Algorithms and their configs (``from rltrainer.algorithms import Algorithm, AlgorithmConfig``).

Imported on first use: ``Algorithm`` imports torch; the configs and the registry do not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.algorithm import Algorithm
    from rltrainer.algorithms.algorithm_config import AlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig"]
__getattr__ = lazy_exports(
    __name__,
    {
        "Algorithm": "rltrainer.algorithms.algorithm",
        "AlgorithmConfig": "rltrainer.algorithms.algorithm_config",
    },
)
