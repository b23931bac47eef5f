"""The RLExperiment CRD: generated from the models, checked in, and structural.

Pure tests of what ``crd.py`` generates; ``test_crd_server.py`` gives the CRD to a real API server
(defaulting, schema and CEL validation, printer columns, ``kubectl explain``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rltrainer.algorithms.registry import ALGORITHMS
from rltrainer_operator import crd

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / crd.DEFAULT_OUTPUT


@functools.cache
def openapi_schema() -> dict[str, Any]:
    return crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (``[]`` for list items, ``{}`` for map values)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}".lstrip("."))
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
    for option in node.get("anyOf", []):
        yield from walk(option, f"{path}|")


def node_at(path: str) -> dict[str, Any]:
    return dict(walk(openapi_schema()))[path]


# --- generated and checked in -------------------------------------------------------------------


def test_checked_in_crd_is_the_generated_one():
    assert CRD_FILE.exists(), f"{CRD_FILE} is missing: run `make crds`"
    assert CRD_FILE.read_text() == crd.render_crd(), f"{CRD_FILE} is stale: run `make crds`"


def test_check_flag_reports_a_stale_file(tmp_path, capsys):
    target = tmp_path / "crd.yaml"
    assert crd.main(["--check", "--output", str(target)]) == 1  # missing
    assert crd.main(["--output", str(target)]) == 0
    assert crd.main(["--check", "--output", str(target)]) == 0
    target.write_text(target.read_text().replace("shortNames:\n    - rlx", "shortNames:\n    - rx"))
    capsys.readouterr()
    assert crd.main(["--check", "--output", str(target)]) == 1
    assert "-    - rx\n+    - rlx" in capsys.readouterr().out


def test_names_scope_and_subresources():
    spec = crd.build_crd()["spec"]
    assert crd.build_crd()["metadata"]["name"] == "rlexperiments.rltrainer.io"
    assert spec["group"] == "rltrainer.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "RLExperiment",
        "listKind": "RLExperimentList",
        "plural": "rlexperiments",
        "singular": "rlexperiment",
        "shortNames": ["rlx"],
        "categories": ["rltrainer"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_printer_columns_point_at_schema_fields():
    columns = crd.build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == [
        "Phase",
        "Algo",
        "Env",
        "Iteration",
        "Return",
        "Restarts",
        "Best",
        "Age",
    ]
    nodes = dict(walk(openapi_schema()))
    for column in columns:
        path = column["jsonPath"].lstrip(".")
        if path == "metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        assert path in nodes, column
        assert nodes[path]["type"] == column["type"], column


# --- structural ---------------------------------------------------------------------------------


def test_schema_is_structural():
    for path, node in walk(openapi_schema()):
        assert not {"$ref", "$defs", "title", "allOf", "oneOf", "not", "const"} & set(node), path
        if path.endswith("|"):  # an int-or-string branch: a bare type
            assert set(node) == {"type"}, path
            continue
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties", {}) is not False, path
        if node["type"] == "object" and path not in ("", "metadata"):
            assert {"properties", "additionalProperties", "x-kubernetes-preserve-unknown-fields"} & set(
                node
            ), path
        if node["type"] == "array":
            assert "items" in node, path
        for required in node.get("required", []):
            assert required in node["properties"], (path, required)


def test_every_field_has_a_description():
    for path, node in walk(openapi_schema()):
        if path and not path.endswith(("[]", "{}", "|")) and path not in ("apiVersion", "kind", "metadata"):
            assert node.get("description"), path


def test_open_maps_preserve_unknown_fields_and_string_maps_say_so():
    for path in ("spec.config", "spec.envConfig"):
        assert node_at(path)["x-kubernetes-preserve-unknown-fields"] is True
        assert "additionalProperties" not in node_at(path)
    assert node_at("spec.learners.nodeSelector")["additionalProperties"] == {"type": "string"}
    assert node_at("spec.stop")["additionalProperties"] == {"type": "number"}


def test_optional_fields_are_nullable_without_a_null_default():
    for path in (
        "spec.image",
        "spec.activeDeadlineSeconds",
        "spec.storage.credentialsSecretRef",
        "status.iteration",
    ):
        assert node_at(path)["nullable"] is True, path
        assert "default" not in node_at(path), path


def test_defaults_enums_bounds_and_patterns_are_kept():
    assert node_at("spec.learners")["default"] == {}
    assert node_at("spec.learners.replicas") == {
        "description": "Number of learners (0: the learner runs inside the driver on the head).",
        "type": "integer",
        "default": 1,
        "minimum": 0,
        "maximum": 64,
    }
    assert node_at("spec.stop")["default"] == {"training_iteration": 100}
    assert node_at("spec.algorithm")["enum"] == sorted(ALGORITHMS)
    assert node_at("spec.checkpoint.uri")["pattern"].startswith("^s3://")
    assert node_at("spec.head.cpu")["x-kubernetes-int-or-string"] is True
    assert node_at("spec.head.cpu")["minimum"] == 0  # the pattern binds strings only
    assert node_at("status.phase")["enum"][0] == "Pending"
    assert node_at("status.conditions")["x-kubernetes-list-map-keys"] == ["type"]
    assert "gpusPerRunner" not in node_at("spec.rollouts")["properties"]  # GPUs on rollouts: unknown field
