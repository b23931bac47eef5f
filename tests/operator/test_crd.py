"""The RLExperiment CRD: generated from the models, structural, and validating like the API server.

``crd_errors`` does what the API server does with a request, in its order: defaulting, the
openAPIV3Schema (checked with ``jsonschema``; unknown fields fail as with ``kubectl``'s
strict field validation), then the CEL rules (evaluated with ``celpy``), transition rules
only when there is an old object. ``test_validation.py`` uses it too.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml

from rltrainer.algorithms.registry import ALGORITHMS
from rltrainer_operator import crd
from rltrainer_operator.models import ExperimentSpec, RLExperiment

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / crd.DEFAULT_OUTPUT
EXAMPLES = ROOT / "examples"
DATA = Path(__file__).resolve().parent / "data"


def load_manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


# --- the API server, as far as a test can play it ---------------------------------------------


@functools.cache
def openapi_schema() -> dict[str, Any]:
    return crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def to_jsonschema(node: dict[str, Any]) -> dict[str, Any]:
    """An openAPIV3Schema node as JSON Schema (2020-12)."""
    out = {key: value for key, value in node.items() if not key.startswith("x-kubernetes-")}
    out.pop("nullable", None)
    if node.get("nullable"):
        out["type"] = [node["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(limit)
    if "properties" in node:
        out["properties"] = {name: to_jsonschema(child) for name, child in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False  # kubectl's default --validate=strict rejects unknown fields
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_jsonschema(node["additionalProperties"])
    if "items" in node:
        out["items"] = to_jsonschema(node["items"])
    return out


def apply_defaults(node: dict[str, Any], value: Any) -> None:
    """The API server's defaulting: absent fields get their default, then their children theirs."""
    if isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                apply_defaults(child, value[name])
        if isinstance(node.get("additionalProperties"), dict):
            for item in value.values():
                apply_defaults(node["additionalProperties"], item)
    elif isinstance(value, list) and "items" in node:
        for item in value:
            apply_defaults(node["items"], item)


@functools.cache
def _cel_program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_errors(node: dict[str, Any], value: Any, old: Any = None, path: str = "") -> list[str]:
    """Every failing ``x-kubernetes-validations`` rule under ``node``, as ``path: message``."""
    errors = []
    for rule in node.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"] and old is None:
            continue  # a transition rule: only on updates
        context = {"self": celpy.json_to_cel(value)}
        if old is not None:
            context["oldSelf"] = celpy.json_to_cel(old)
        try:
            passed = bool(_cel_program(rule["rule"]).evaluate(context))
        except celpy.CELEvalError as err:
            passed, rule = False, {**rule, "message": f"{rule['message']} (error: {err.args[0]})"}
        if not passed:
            errors.append(f"{path}: {rule['message']}")
    if isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                old_child = old.get(name) if isinstance(old, dict) else None
                errors += cel_errors(child, value[name], old_child, f"{path}.{name}".lstrip("."))
        if isinstance(node.get("additionalProperties"), dict):
            for key, item in value.items():
                errors += cel_errors(node["additionalProperties"], item, None, f"{path}.{key}")
    elif isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            errors += cel_errors(node["items"], item, None, f"{path}[{index}]")
    return errors


def crd_errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """``(field path, message)`` for everything the API server would reject in ``obj``."""
    schema = openapi_schema()
    obj = copy.deepcopy(obj)
    apply_defaults(schema, obj)
    if old is not None:
        old = copy.deepcopy(old)
        apply_defaults(schema, old)
    validator = jsonschema.Draft202012Validator(to_jsonschema(schema))
    errors = [
        (
            "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip("."),
            err.message,
        )
        for err in validator.iter_errors(obj)
    ]
    if errors:  # CEL rules run on objects the schema admitted
        return errors
    return [tuple(error.split(": ", 1)) for error in cel_errors(schema, obj, old)]


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
    assert [c["name"] for c in columns] == ["Phase", "Algo", "Env", "Iteration", "Return", "Restarts", "Age"]
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
    assert node_at("status.phase")["enum"][0] == "Pending"
    assert node_at("status.conditions")["x-kubernetes-list-map-keys"] == ["type"]
    assert "gpusPerRunner" not in node_at("spec.rollouts")["properties"]  # GPUs on rollouts: unknown field


def test_api_server_defaults_equal_the_models_defaults():
    """A minimal manifest defaulted by the API server reads the same as the models fill it in."""
    manifest = load_manifest("minimal.yaml")
    defaulted = copy.deepcopy(manifest)
    apply_defaults(openapi_schema(), defaulted)
    from_models = ExperimentSpec.model_validate(manifest["spec"]).model_dump(mode="json", exclude_none=True)
    assert defaulted["spec"] == from_models


# --- instances ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["minimal.yaml", "full.yaml"])
def test_good_manifests_are_admitted(name):
    assert crd_errors(load_manifest(name)) == []


def test_a_status_written_by_the_operator_is_admitted():
    manifest = load_manifest("minimal.yaml")
    manifest["status"] = RLExperiment.model_validate(
        {
            "spec": manifest["spec"],
            "status": {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "Running",
                        "status": "True",
                        "reason": "JobRunning",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "iteration": 3,
                "episodeReturnMean": 21.5,
            },
        }
    ).status.model_dump(mode="json")
    assert crd_errors(manifest) == []


@pytest.mark.parametrize(
    ("patch", "path", "fragment"),
    [
        ({"algorithm": "NOPE"}, "spec.algorithm", "is not one of"),
        ({"rollouts": {"replicas": -1}}, "spec.rollouts.replicas", "less than the minimum"),
        ({"rollouts": {"gpusPerRunner": 1}}, "spec.rollouts", "'gpusPerRunner' was unexpected"),
        ({"checkpoint": {"uri": "gs://bucket/x"}}, "spec.checkpoint.uri", "does not match"),
        ({"head": {"cpu": 1.5}}, "spec.head.cpu", "is not valid under any of the given schemas"),
        (
            {"learners": {"replicas": 0, "gpusPerLearner": 1}},
            "spec.learners",
            "gpusPerLearner needs replicas",
        ),
        ({"stop": {"": 3}}, "spec.stop", "stop keys must be non-empty"),
    ],
)
def test_bad_instances_are_rejected(patch, path, fragment):
    manifest = load_manifest("minimal.yaml")
    for key, value in patch.items():
        manifest["spec"][key] = (
            {**manifest["spec"].get(key, {}), **value} if isinstance(value, dict) else value
        )
    errors = crd_errors(manifest)
    assert any(where == path and fragment in message for where, message in errors), errors


def test_int_quantities_are_admitted_like_kubernetes_quantities():
    manifest = load_manifest("minimal.yaml")
    manifest["spec"]["head"] = {"cpu": 4, "memory": "8Gi"}
    assert crd_errors(manifest) == []


# --- CEL transition rules -----------------------------------------------------------------------


@pytest.mark.parametrize("field", ["algorithm", "env"])
def test_algorithm_and_env_are_immutable(field):
    old = load_manifest("minimal.yaml")
    new = copy.deepcopy(old)
    new["spec"][field] = "DifferentEnv-v0" if field == "env" else "PPO-but-not"
    errors = crd_errors(new, old=old)
    if field == "algorithm":  # also outside the enum: the schema rejects it before CEL runs
        assert ("spec.algorithm", f"'PPO-but-not' is not one of {sorted(ALGORITHMS)}") in errors
        new["spec"]["algorithm"] = next(
            (a for a in sorted(ALGORITHMS) if a != old["spec"]["algorithm"]), None
        )
        if new["spec"]["algorithm"] is None:
            pytest.skip("only one algorithm is registered")
        errors = crd_errors(new, old=old)
    assert errors == [(f"spec.{field}", f"{field} is immutable")]


def test_other_fields_may_change():
    old = load_manifest("minimal.yaml")
    new = copy.deepcopy(old)
    new["spec"]["rollouts"] = {"replicas": 8}
    new["spec"]["suspend"] = True
    assert crd_errors(new, old=old) == []


def test_transition_rules_do_not_run_on_create():
    assert crd_errors(load_manifest("minimal.yaml"), old=None) == []


# --- examples/ ----------------------------------------------------------------------------------


def _example_documents() -> list[Any]:
    if not EXAMPLES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="examples/ does not exist yet"))]
    documents = [
        pytest.param(doc, id=f"{path.name}:{doc.get('metadata', {}).get('name', index)}")
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for index, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if isinstance(doc, dict) and doc.get("kind") == "RLExperiment"
    ]
    return documents or [
        pytest.param(None, marks=pytest.mark.skip(reason="no RLExperiment in examples/*.yaml"))
    ]


@pytest.mark.parametrize("document", _example_documents())
def test_examples_are_admitted_and_valid(document):
    from rltrainer_operator.validation import validate_experiment

    assert document["apiVersion"] == "rltrainer.io/v1alpha1"
    assert crd_errors(document) == []
    validate_experiment(document)
