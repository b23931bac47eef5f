"""RLlib's method annotations (``from rltrainer.utils.annotations import override``), for code
written as RLlib's examples write it: ``@override(TorchModelV2)`` above an overridden method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def override(parent: type) -> Callable[[F], F]:
    """Mark a method as overriding one of ``parent``'s; ``NameError`` at class definition when
    ``parent`` has no method of that name (a typo, or a method the parent does not define)."""

    def check(method: F) -> F:
        if not hasattr(parent, method.__name__):
            raise NameError(f"{method.__name__} does not override any method of {parent.__name__}")
        return method

    return check


def _marker(obj: F) -> F:
    return obj


# RLlib's API-stability markers: documentation only, here as there.
PublicAPI = DeveloperAPI = ExperimentalAPI = OldAPIStack = _marker
OverrideToImplementCustomLogic = OverrideToImplementCustomLogic_CallToSuperRecommended = _marker

__all__ = [
    "DeveloperAPI",
    "ExperimentalAPI",
    "OldAPIStack",
    "OverrideToImplementCustomLogic",
    "OverrideToImplementCustomLogic_CallToSuperRecommended",
    "PublicAPI",
    "override",
]
