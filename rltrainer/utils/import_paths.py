"""``"package.module:qualname"`` paths: how configs name user code without pickling it.

``to_dict()`` writes classes and functions as paths (``object_path``); a config read back
imports them (``import_object``, which also takes RLlib's dotted ``package.module.Class``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rltrainer.errors import ConfigError


def object_path(obj: Any) -> str:
    """``"package.module:qualname"`` of a class or function (what ``to_dict()`` writes)."""
    module = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or f"<{type(obj).__qualname__} object>"
    return f"{module}:{name}"


def import_object(path: str) -> Any:
    """The object ``"package.module:qualname"`` (or ``"package.module.Name"``) names; raises
    ``ImportError``, ``AttributeError`` or ``ValueError`` saying what is missing."""
    module_name, sep, name = path.partition(":")
    if not sep:
        module_name, _, name = path.rpartition(".")
    obj = importlib.import_module(module_name)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_function(setting: str, spec: Any) -> Callable[..., Any] | None:
    """The function a config ``setting`` names (``None`` when unset): the function itself, or
    one importable by ``"package.module:function"``; ``ConfigError`` saying why not."""
    if spec is None or callable(spec):
        return spec
    module_name, _, qualname = str(spec).partition(":")
    if "<" in qualname:
        raise ConfigError(
            f"{setting} {spec!r} names a lambda, a nested function or a callable object, which "
            "cannot be imported by name: define the function at module level, or pass the function "
            f"itself (e.g. Algorithm.from_checkpoint(path, config_overrides={{'{setting}': fn}}))"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{setting} {spec!r}: cannot import module {module_name!r} ({err})") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"{setting} {spec!r}: module {module_name!r} has no attribute {qualname!r}")
    if not callable(obj):
        raise ConfigError(f"{setting} {spec!r} is a {type(obj).__name__}, not a function")
    return obj


__all__ = ["import_object", "object_path", "resolve_function"]
