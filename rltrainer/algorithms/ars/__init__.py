"""ARS and ARSConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.ars`` has them
(``from rltrainer.algorithms.ars import ARS, ARSConfig``): the classes of
``rltrainer.algorithms.es``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.algorithms.es import __getattr__  # noqa: F401 - its lazy exports serve this path

if TYPE_CHECKING:
    from rltrainer.algorithms.es import ARS, ARSConfig

__all__ = ["ARS", "ARSConfig"]
