"""MARWIL and BC (``from rltrainer.algorithms.marwil import MARWIL, MARWILConfig, BC, BCConfig``).

Imported on first use: the algorithms import torch, the configs (in ``marwil_config``) do not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.marwil.marwil import BC, MARWIL
    from rltrainer.algorithms.marwil.marwil_config import BCConfig, MARWILConfig

__all__ = ["BC", "MARWIL", "BCConfig", "MARWILConfig"]
__getattr__ = lazy_exports(
    __name__,
    {
        "BC": "rltrainer.algorithms.marwil.marwil",
        "MARWIL": "rltrainer.algorithms.marwil.marwil",
        "BCConfig": "rltrainer.algorithms.marwil.marwil_config",
        "MARWILConfig": "rltrainer.algorithms.marwil.marwil_config",
    },
)
