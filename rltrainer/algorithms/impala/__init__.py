"""IMPALA (``from rltrainer.algorithms.impala import IMPALA, IMPALAConfig``).

Imported on first use: ``IMPALA`` imports torch, ``IMPALAConfig`` (in ``impala_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.impala.impala import IMPALA
    from rltrainer.algorithms.impala.impala_config import IMPALAConfig

    Impala = IMPALA
    ImpalaConfig = IMPALAConfig

__all__ = ["IMPALA", "IMPALAConfig", "Impala", "ImpalaConfig"]
__getattr__ = lazy_exports(
    __name__,
    {
        "IMPALA": "rltrainer.algorithms.impala.impala",
        "Impala": "rltrainer.algorithms.impala.impala",
        "IMPALAConfig": "rltrainer.algorithms.impala.impala_config",
        "ImpalaConfig": "rltrainer.algorithms.impala.impala_config",
    },
)
