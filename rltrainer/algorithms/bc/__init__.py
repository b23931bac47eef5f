"""BC and BCConfig where RLlib's ``ray.rllib.algorithms.bc`` has them
(``from rltrainer.algorithms.bc import BC, BCConfig``): the classes of
``rltrainer.algorithms.marwil``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.marwil.marwil import BC
    from rltrainer.algorithms.marwil.marwil_config import BCConfig

__all__ = ["BC", "BCConfig"]
__getattr__ = lazy_exports(
    __name__,
    {"BC": "rltrainer.algorithms.marwil.marwil", "BCConfig": "rltrainer.algorithms.marwil.marwil_config"},
)
