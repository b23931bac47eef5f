"""SAC (``from rltrainer.algorithms.sac import SAC, SACConfig``).

Imported on first use: ``SAC`` imports torch, ``SACConfig`` (in ``sac_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.sac.sac import SAC
    from rltrainer.algorithms.sac.sac_config import SACConfig

__all__ = ["SAC", "SACConfig"]
__getattr__ = lazy_exports(
    __name__, {"SAC": "rltrainer.algorithms.sac.sac", "SACConfig": "rltrainer.algorithms.sac.sac_config"}
)
