"""``rltrainer.agents.ddpg.td3`` (RLlib 1.x's module path): ``TD3Trainer`` and ``TD3_DEFAULT_CONFIG``."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents.ddpg import __getattr__ as _ddpg_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg.ddpg import TD3 as TD3Trainer  # noqa: N811 - the Trainer-era name

    TD3_DEFAULT_CONFIG: dict[str, Any]

__all__ = ["TD3_DEFAULT_CONFIG", "TD3Trainer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return _ddpg_exports(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
