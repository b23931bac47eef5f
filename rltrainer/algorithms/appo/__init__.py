"""APPO (``from rltrainer.algorithms.appo import APPO, APPOConfig``).

Imported on first use: ``APPO`` imports torch, ``APPOConfig`` (in ``appo_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.appo.appo import APPO
    from rltrainer.algorithms.appo.appo_config import APPOConfig

__all__ = ["APPO", "APPOConfig"]
__getattr__ = lazy_exports(
    __name__,
    {"APPO": "rltrainer.algorithms.appo.appo", "APPOConfig": "rltrainer.algorithms.appo.appo_config"},
)
