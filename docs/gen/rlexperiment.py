"""The RLExperiment reference page's tables, generated from the resource's schema.

The schema is ``rltrainer_operator.crd.build_schema()``: the CRD's ``openAPIV3Schema``, itself
generated from the pydantic models in ``operator/rltrainer_operator/models.py``. So every field
of the models is here with its type, default, validation (bounds, patterns, enums, CEL rules)
and the docstring written under it; a field cannot be added without appearing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rltrainer_operator.crd import build_schema


def _anchor(path: str) -> str:
    return path.replace(".", "-").replace("[]", "").lower()


def _is_object(node: dict[str, Any]) -> bool:
    return "properties" in node


def _type(node: dict[str, Any], path: str) -> str:
    """A field's type as a reader writes it: ``integer``, ``[]Toleration``, ``map[string]string``."""
    if "anyOf" in node:
        kind = " or ".join(option["type"] for option in node["anyOf"])
    elif _is_object(node):
        kind = f"[object](#{_anchor(path)})"
    elif node.get("type") == "array":
        kind = "array of " + _type(node["items"], path + "[]")
    elif isinstance(node.get("additionalProperties"), dict):
        kind = f"map of string to {_type(node['additionalProperties'], path + '.*')}"
    elif node.get("x-kubernetes-preserve-unknown-fields"):
        kind = "object (any keys)"
    else:
        kind = node.get("type", "any")
    return kind + (" (nullable)" if node.get("nullable") else "")


def _rules(node: dict[str, Any]) -> list[str]:
    """What the API server checks on a field's value."""
    rules = []
    bounds = [
        ("minimum", ">" if node.get("exclusiveMinimum") else ">="),
        ("maximum", "<" if node.get("exclusiveMaximum") else "<="),
    ]
    rules += [f"{sign} {node[key]}" for key, sign in bounds if key in node]
    for key, words in (
        ("minLength", "length >="),
        ("maxLength", "length <="),
        ("minItems", "items >="),
        ("maxItems", "items <="),
        ("minProperties", "keys >="),
        ("maxProperties", "keys <="),
    ):
        if key in node:
            rules.append(f"{words} {node[key]}")
    if "pattern" in node:
        rules.append(f"matches `{node['pattern']}`")
    if "enum" in node:
        rules.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    for rule in node.get("x-kubernetes-validations", []):
        message = rule.get("message") or rule["rule"]
        rules.append(f"{message} (CEL: `{rule['rule']}`)")
    return rules


#: A Markdown code span (`...`) of one line.
_CODE_SPAN = re.compile(r"(`[^`\n]*`)")


def _cell(text: str) -> str:
    """``text`` as one table cell: one line, its pipes escaped outside code spans. Inside one they
    stay as written (a CEL rule's ``||``): the table splits cells outside code spans only, and a
    backslash in a code span would show."""
    parts = _CODE_SPAN.split(text.replace("\n", " "))
    return "".join(part if index % 2 else part.replace("|", "\\|") for index, part in enumerate(parts))


def _table(path: str, node: dict[str, Any]) -> list[str]:
    required = set(node.get("required", []))
    lines = [f"### {path} {{#{_anchor(path)}}}", "", _cell(node.get("description", "")), ""]
    if path.endswith(("[]", ".*")) and (rules := _rules(node)):  # a field's own are in its row
        lines += [f"Validation of each item: {_cell('; '.join(rules))}", ""]
    lines += ["| field | type | default | validation | description |", "|---|---|---|---|---|"]
    for name, child in node["properties"].items():
        default = f"`{json.dumps(child['default'])}`" if "default" in child else ""
        rules = _rules(child)
        if name in required:
            rules.insert(0, "**required**")
        lines.append(
            f"| `{name}` | {_type(child, f'{path}.{name}')} | {_cell(default)} | "
            f"{_cell('; '.join(rules))} | {_cell(child.get('description', ''))} |"
        )
    return [*lines, ""]


def _objects(path: str, node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every object node under ``node`` (itself first), depth first in field order."""
    found = [(path, node)] if _is_object(node) else []
    for name, child in node.get("properties", {}).items():
        found += _objects(f"{path}.{name}", child)
    if "items" in node:
        found += _objects(path + "[]", node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        found += _objects(path + ".*", node["additionalProperties"])
    return found


def render(part: str) -> str:
    """``spec`` or ``status``: that half of the resource, one table per object."""
    schema = build_schema()["properties"][part]
    lines: list[str] = []
    for path, node in _objects(part, schema):
        lines += _table(path, node)
    return "\n".join(lines)
