"""Algorithms are Ray Tune ``Trainable``s, without importing Tune until it is used.

RLlib's algorithms subclass Tune's ``Trainable``, so ``tune.Tuner(PPO, ...)`` takes the class
itself (Tune checks ``issubclass(PPO, Trainable)``). Importing ``ray.tune`` costs about a
second, which a script that trains one algorithm (``config.build()``, ``train()``) never
needs. So ``Algorithm`` starts out with a stand-in base, ``TrainableSlot``, and takes
``Trainable`` as its base (``become_trainable``) as soon as ``ray.tune`` is imported:
``rltrainer.tune.registration``'s import hook calls it right after Tune loads (when the
algorithm module is already imported), and the algorithm module calls it at its own import
when Tune is already there. Assigning ``__bases__`` updates the method resolution of every
subclass in place, so from then on every algorithm class is, and behaves as, a ``Trainable``
subclass: ``tune.Tuner(PPO)``, ``tune.run("PPO")`` and existing instances alike.

The code paths that use Tune's ``Trainable`` methods run only under Tune (an algorithm created
by Tune's trial actor, which imported ``ray.tune`` first).
"""

from __future__ import annotations

import sys
from typing import Any

_TUNE = "ray.tune"
_ALGORITHM_MODULE = "rltrainer.algorithms.algorithm"

# Keys of ``ray.tune.result`` named here to keep Tune unimported (tests check they match Tune's).
TRIAL_INFO = "__trial_info__"
STDOUT_FILE = "__stdout_file__"
STDERR_FILE = "__stderr_file__"
SHOULD_CHECKPOINT = "should_checkpoint"
TUNE_FIELDS = (TRIAL_INFO, STDOUT_FILE, STDERR_FILE)
"""What Tune adds to a trial's config for ``Trainable.__init__`` (trial info, log files)."""


class TrainableSlot:
    """``Algorithm``'s base until ``ray.tune`` is imported; then Tune's ``Trainable`` replaces it.

    It answers what ``Trainable`` answers for an algorithm that Tune did not create."""

    @property
    def trial_id(self) -> str:
        return "default"

    @property
    def trial_name(self) -> str:
        return "default"

    def get_config(self) -> Any:
        """The algorithm's config (``Trainable.get_config``)."""
        return self.config  # type: ignore[attr-defined]


def tune_trainable() -> type:
    """Tune's ``Trainable`` (imports ``ray.tune``, which makes the algorithms Trainables)."""
    from ray.tune import Trainable

    become_trainable()  # the import hook did it already, unless it is not installed
    return Trainable


def become_trainable() -> None:
    """Make ``Algorithm`` (and so every algorithm) a subclass of Tune's ``Trainable``, if both
    modules are imported; idempotent."""
    tune, algorithm = sys.modules.get(_TUNE), sys.modules.get(_ALGORITHM_MODULE)
    if tune is None or algorithm is None or not hasattr(algorithm, "Algorithm"):
        return
    trainable: Any = getattr(tune, "Trainable", None)
    base = algorithm.Algorithm
    if trainable is not None and not issubclass(base, trainable):
        base.__bases__ = tuple(trainable if cls is TrainableSlot else cls for cls in base.__bases__)
