"""rltrainer: RLlib-style Training APIs on Ray, torch and gymnasium."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.tune.logger import pretty_print

__version__ = "0.1.0"
__all__ = ["pretty_print"]
__getattr__ = lazy_exports(__name__, {"pretty_print": "rltrainer.tune.logger"})
