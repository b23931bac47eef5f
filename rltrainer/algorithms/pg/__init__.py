"""PG (``from rltrainer.algorithms.pg import PG, PGConfig``).

Imported on first use: ``PG`` imports torch, ``PGConfig`` (in ``pg_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.pg.pg import PG
    from rltrainer.algorithms.pg.pg_config import PGConfig

__all__ = ["PG", "PGConfig"]
__getattr__ = lazy_exports(
    __name__, {"PG": "rltrainer.algorithms.pg.pg", "PGConfig": "rltrainer.algorithms.pg.pg_config"}
)
