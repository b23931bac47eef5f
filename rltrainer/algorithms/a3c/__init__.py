"""A3C (``from rltrainer.algorithms.a3c import A3C, A3CConfig``).

Imported on first use: ``A3C`` imports torch, ``A3CConfig`` (in ``a3c_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.a3c.a3c import A3C
    from rltrainer.algorithms.a3c.a3c_config import A3CConfig

__all__ = ["A3C", "A3CConfig"]
__getattr__ = lazy_exports(
    __name__, {"A3C": "rltrainer.algorithms.a3c.a3c", "A3CConfig": "rltrainer.algorithms.a3c.a3c_config"}
)
