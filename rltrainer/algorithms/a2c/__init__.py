"""A2C (``from rltrainer.algorithms.a2c import A2C, A2CConfig``).

Imported on first use: ``A2C`` imports torch, ``A2CConfig`` (in ``a2c_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.a2c.a2c import A2C
    from rltrainer.algorithms.a2c.a2c_config import A2CConfig

__all__ = ["A2C", "A2CConfig"]
__getattr__ = lazy_exports(
    __name__, {"A2C": "rltrainer.algorithms.a2c.a2c", "A2CConfig": "rltrainer.algorithms.a2c.a2c_config"}
)
