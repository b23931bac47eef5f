"""SAC (``from rltrainer.algorithms.sac import SAC, SACConfig``)."""

from rltrainer.algorithms.sac.sac import SAC, SACConfig

__all__ = ["SAC", "SACConfig"]
