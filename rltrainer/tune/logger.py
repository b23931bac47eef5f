"""``pretty_print(result)``: a result as YAML-like text (Ray Tune's ``ray.tune.logger.pretty_print``)."""

from __future__ import annotations

import json
from collections.abc import Container
from typing import Any

import yaml

# Tune's rule: sequences longer than this print on one line ([1, 2, 3, 4]).
_SEQUENCE_LEN_FLOW_STYLE = 3


class _Dumper(yaml.SafeDumper):
    def represent_sequence(self, tag: str, sequence: Any, flow_style: bool | None = None) -> Any:
        if len(sequence) > _SEQUENCE_LEN_FLOW_STYLE:
            flow_style = True
        return super().represent_sequence(tag, sequence, flow_style=flow_style)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars as lists and numbers; anything else JSON cannot write as its ``str``."""
    if hasattr(value, "tolist"):  # numpy arrays and scalars (and tensors)
        return value.tolist()
    return str(value)


def pretty_print(result: dict[str, Any], exclude: Container[str] | None = None) -> str:
    """``result`` as YAML, nested dicts indented, without ``None`` values, ``config``,
    ``hist_stats`` and the keys in ``exclude`` (as Tune prints it)."""
    skipped = {"config", "hist_stats"}
    out = {
        key: value
        for key, value in result.items()
        if value is not None and key not in skipped and (exclude is None or key not in exclude)
    }
    cleaned = json.loads(json.dumps(out, default=_plain))
    return yaml.dump(cleaned, Dumper=_Dumper, default_flow_style=False)


__all__ = ["pretty_print"]
