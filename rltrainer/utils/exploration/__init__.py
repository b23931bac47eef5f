"""The exploration classes under the documents' import paths (``ray.rllib.utils.exploration``):
``rltrainer.utils.exploration.epsilon_greedy.EpsilonGreedy``, ``...gaussian_noise.GaussianNoise``,
... and this package itself. One implementation: ``rltrainer.core.exploration``.

The documents' module of each class is registered here as a submodule (no file of its own),
so ``exploration_config={"type": "rltrainer.utils.exploration.epsilon_greedy.EpsilonGreedy"}``
and ``from rltrainer.utils.exploration.soft_q import SoftQ`` both work. Nothing here imports torch.
"""

from __future__ import annotations

import sys
import types

from rltrainer.core import exploration as _core

#: RLlib's module (under ``ray.rllib.utils.exploration``) -> the classes it defines.
DOCUMENTED_MODULES: dict[str, tuple[str, ...]] = {
    "exploration": ("Exploration",),
    "epsilon_greedy": ("EpsilonGreedy",),
    "soft_q": ("SoftQ",),
    "stochastic_sampling": ("StochasticSampling",),
    "random": ("Random",),
    "gaussian_noise": ("GaussianNoise",),
    "ornstein_uhlenbeck_noise": ("OrnsteinUhlenbeckNoise",),
    "per_worker_epsilon_greedy": ("PerWorkerEpsilonGreedy",),
    "per_worker_gaussian_noise": ("PerWorkerGaussianNoise",),
    "per_worker_ornstein_uhlenbeck_noise": ("PerWorkerOrnsteinUhlenbeckNoise",),
    "parameter_noise": ("ParameterNoise",),
    "curiosity": ("Curiosity",),
}

for _module, _classes in DOCUMENTED_MODULES.items():
    _submodule = types.ModuleType(
        f"{__name__}.{_module}", f"``{', '.join(_classes)}`` (rltrainer.core.exploration)."
    )
    for _name in _classes:
        setattr(_submodule, _name, getattr(_core, _name))
        globals()[_name] = getattr(_core, _name)  # and here: rltrainer.utils.exploration.SoftQ
    _submodule.__all__ = list(_classes)
    sys.modules[_submodule.__name__] = _submodule
    globals()[_module] = _submodule

__all__ = sorted(name for names in DOCUMENTED_MODULES.values() for name in names)
