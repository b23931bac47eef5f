"""BC and BCConfig where RLlib's ``ray.rllib.algorithms.bc`` has them
(``from rltrainer.algorithms.bc import BC, BCConfig``): the classes of
``rltrainer.algorithms.marwil``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.algorithms.marwil import __getattr__  # noqa: F401 - its lazy exports serve this path

if TYPE_CHECKING:
    from rltrainer.algorithms.marwil import BC, BCConfig

__all__ = ["BC", "BCConfig"]
