"""Algorithms and their configs (``from rltrainer.algorithms import Algorithm, AlgorithmConfig``)."""

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.algorithm_config import AlgorithmConfig

__all__ = ["Algorithm", "AlgorithmConfig"]
