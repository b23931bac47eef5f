"""rltrainer: RLlib-style Training APIs on Ray, torch and gymnasium."""

from typing import TYPE_CHECKING

from rltrainer.utils import torch_import
from rltrainer.utils.lazy import lazy_exports
from rltrainer.version import __version__ as __version__

torch_import.install()  # torch's import, when it comes, with the garbage collector paused

if TYPE_CHECKING:
    from rltrainer.tune.logger import pretty_print

__all__ = ["pretty_print"]
__getattr__ = lazy_exports(__name__, {"pretty_print": "rltrainer.tune.logger"})

# tune.Tuner("PPO", ...) finds our algorithms once ray.tune is imported (rltrainer.tune.registration).
from rltrainer.tune import registration as _tune_registration  # noqa: E402

_tune_registration.install()
