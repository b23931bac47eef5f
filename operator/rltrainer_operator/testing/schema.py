"""Validate objects against a CRD's ``openAPIV3Schema`` as an API server would (structurally).

Kubernetes' schema dialect differs from JSON Schema in a few keywords: ``nullable``,
``x-kubernetes-int-or-string`` and ``x-kubernetes-preserve-unknown-fields``. ``to_json_schema``
rewrites those; unknown fields are reported (a real API server prunes them silently, which
hides typos: for a test, an error is more useful).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jsonschema
import yaml


def to_json_schema(node: Any) -> Any:
    """An openAPIV3Schema (sub)tree as Draft 7 JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: to_json_schema(value)
        for key, value in node.items()
        if not key.startswith("x-kubernetes-") and key not in ("nullable", "format")
    }
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if (
        out.get("type") in ("object", ["object", "null"])
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """The JSON Schema of one version of a CustomResourceDefinition."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = to_json_schema(entry["schema"]["openAPIV3Schema"])
            # apiVersion/kind/metadata are the API server's; metadata is checked elsewhere.
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            return schema
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


@functools.lru_cache(maxsize=8)
def validator_for(crd_path: str, version: str) -> Callable[[dict[str, Any]], str | None]:
    """``validate(obj) -> None | message`` for objects of the CRD in ``crd_path`` (a YAML file)."""
    with open(crd_path) as f:
        crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    checker = jsonschema.Draft7Validator(crd_schema(crd, version))

    def validate(obj: dict[str, Any]) -> str | None:
        errors = sorted(checker.iter_errors(obj), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        return "; ".join(
            f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in errors[:5]
        )

    return validate
