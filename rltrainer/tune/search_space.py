"""Tune search spaces inside a config: recognizing them and the values they can take.

``PPOConfig().training(lr=tune.grid_search([1e-3, 1e-4]))`` keeps the search space for Tune
(``to_dict()`` hands it over) and checks each value it can take now, so a bad value fails at
the builder call, not in every trial. Nothing here imports ``ray.tune``: a search space is
recognized by its class's module (``ray.tune.search.sample``) or Tune's ``{"grid_search": [...]}``.
"""

from __future__ import annotations

import math
from typing import Any

_SAMPLE_MODULE = "ray.tune.search.sample"


def is_search_space(value: Any) -> bool:
    """A Tune domain (``choice``, ``uniform``, ``sample_from``, ...) or a ``grid_search`` dict."""
    if isinstance(value, dict):
        return set(value) == {"grid_search"} and isinstance(value["grid_search"], list | tuple)
    return any(klass.__module__ == _SAMPLE_MODULE for klass in type(value).__mro__)


def malformed_grid(value: Any) -> dict | None:
    """The first ``{"grid_search": ...}`` in ``value`` (nested ones too) whose values are not a
    non-empty list, where Tune would fail in its trial generator; None when there is none."""
    if isinstance(value, dict):
        if set(value) == {"grid_search"} and not (
            isinstance(value["grid_search"], list | tuple) and value["grid_search"]
        ):
            return value
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return None
    return next((found for item in items if (found := malformed_grid(item)) is not None), None)


def holds_search_space(value: Any) -> bool:
    """``value`` is a search space or a dict or list with one inside (Tune resolves nested ones)."""
    if is_search_space(value):
        return True
    if isinstance(value, dict):
        return any(holds_search_space(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(holds_search_space(v) for v in value)
    return False


def candidates(value: Any) -> list[Any]:
    """Values worth checking before a sweep: every grid value and category, a numeric range's
    bounds, for nested spaces each of those with the other spaces at their first candidate.
    ``sample_from`` functions cannot be checked ahead: they yield nothing."""
    if isinstance(value, dict) and is_search_space(value):
        return [c for item in value["grid_search"] for c in candidates(item)]
    if is_search_space(value):
        return _domain_candidates(value)
    if isinstance(value, dict) and holds_search_space(value):
        return _nested_candidates(value)
    return [value]


def _domain_candidates(domain: Any) -> list[Any]:
    categories = getattr(domain, "categories", None)
    if categories is not None:
        return [c for item in categories for c in candidates(item)]
    lower, upper = getattr(domain, "lower", None), getattr(domain, "upper", None)
    if isinstance(lower, int | float) and isinstance(upper, int | float):
        if isinstance(lower, int) and isinstance(upper, int):  # randint's upper bound is exclusive
            return [lower, max(lower, upper - 1)]
        return [lower, upper] if math.isfinite(upper) else [lower]
    return []  # sample_from(...) and other functions


def _nested_candidates(value: dict) -> list[dict]:
    firsts = {key: (candidates(item) or [None])[0] for key, item in value.items()}
    out: list[dict] = []
    for key, item in value.items():
        if not holds_search_space(item):
            continue
        out.extend({**firsts, key: option} for option in candidates(item))
    return [{k: v for k, v in variant.items() if v is not None} for variant in out]


__all__ = ["candidates", "holds_search_space", "is_search_space", "malformed_grid"]
