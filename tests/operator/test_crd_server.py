"""The RLExperiment CRD on a real API server: installed, defaulted, validated, printed, explained.

Everything here goes through ``kubectl`` against the session's control plane (``control_plane``:
kube-apiserver v1.32 with our CRD and KubeRay's), the way users meet the CRD: ``kubectl apply
--server-side`` of ``crds/`` and of the chart's copy, ``kubectl create`` (strict field validation,
kubectl's default), ``kubectl patch`` (transition rules, the status subresource), ``kubectl get``
(printer columns, short name, category) and ``kubectl explain``. Each rejection must name the
field it is about. The tests share one namespace; objects that are stored are named after the test.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rltrainer_operator import crd
from rltrainer_operator.models import (
    EMPTY_KEY_NEEDS_EXISTS,
    EXISTS_TAKES_NO_VALUE,
    GPUS_NEED_LEARNERS,
    STOP_KEYS_NON_EMPTY,
    ExperimentSpec,
    ExperimentStatus,
    Learners,
)
from rltrainer_operator.testing.envtest import ControlPlane
from rltrainer_operator.validation import validate_experiment
from tests.conftest import kuberay_crd_files

try:
    from .test_crd import openapi_schema, walk  # tests/operator is a package
except ImportError:
    from test_crd import openapi_schema, walk  # pytest's rootdir-relative import

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
CRDS, CHART_CRDS = ROOT / "crds", ROOT / "charts" / "rltrainer-operator" / "crds"
DELETE = object()


def load_manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def merge_spec(manifest: dict[str, Any], patch: Any) -> dict[str, Any]:
    """``manifest`` with ``patch`` merged into its spec (``DELETE`` removes a key, or the spec)."""
    manifest = copy.deepcopy(manifest)
    if patch is DELETE:
        del manifest["spec"]
        return manifest

    def merge(target: dict[str, Any], changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if value is DELETE:
                target.pop(key, None)
            elif isinstance(value, dict) and isinstance(target.get(key), dict):
                merge(target[key], value)
            else:
                target[key] = copy.deepcopy(value)

    merge(manifest["spec"], patch or {})
    return manifest


def experiment(name: str, patch: Any = None, base: str = "minimal.yaml") -> dict[str, Any]:
    manifest = merge_spec(load_manifest(base), patch)
    manifest["metadata"] = {"name": name}
    return manifest


def names_field(message: str, path: str, *, or_below: bool = False) -> bool:
    """Whether the API server's ``message`` is about ``path`` (``spec.rollouts.replicas: ...`` or,
    from strict field validation, ``unknown field "spec.rollouts.gpusPerRunner"``); with
    ``or_below``, a field under ``path`` counts too."""
    ends = (": ", '"', ".", "[") if or_below else (": ", '"')
    return any(f"{path}{end}" in message for end in ends)


def rejected(done: subprocess.CompletedProcess) -> str:
    """kubectl's error for a request the server refused; fails the test when it was admitted."""
    assert done.returncode != 0, f"admitted: {done.stdout.strip()}"
    return done.stderr


@dataclasses.dataclass
class ApiServer:
    """``kubectl -n NS``, as a user runs it, in one namespace of the session's control plane."""

    plane: ControlPlane
    ns: str

    def kubectl(self, *args: str, stdin: Any = None) -> subprocess.CompletedProcess:
        """Never raises: tests look at the exit status and at stderr (a dict ``stdin`` goes as JSON)."""
        text = stdin if stdin is None or isinstance(stdin, str) else json.dumps(stdin)
        return self.plane.kubectl_run(*args, "-n", self.ns, stdin=text, check=False)

    def create(self, manifest: dict[str, Any], *, dry_run: bool = False) -> subprocess.CompletedProcess:
        manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": self.ns}}
        return self.kubectl(
            "create", "-f", "-", "-o", "json", *(["--dry-run=server"] if dry_run else []), stdin=manifest
        )

    def admitted(self, manifest: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """The object as the server stored it (or would have, with ``dry_run``)."""
        done = self.create(manifest, dry_run=dry_run)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def patch(
        self, name: str, patch: dict[str, Any], *, dry_run: bool = False
    ) -> subprocess.CompletedProcess:
        """``kubectl patch --type=merge``; through the status subresource when it patches status."""
        args = ["--subresource=status"] if "status" in patch else []
        args += ["--dry-run=server"] if dry_run else []
        return self.kubectl("patch", "rlx", name, "--type=merge", "-p", json.dumps(patch), *args)


@contextlib.contextmanager
def api_namespace(plane: ControlPlane, name: str) -> Iterator[ApiServer]:
    """A namespace for a module's tests, deleted after them (nothing in it has finalizers)."""
    plane.kubectl_run("create", "namespace", name)
    try:
        yield ApiServer(plane, name)
    finally:
        plane.kubectl_run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def server(control_plane):
    with api_namespace(control_plane, "crd-server") as api:
        yield api


@pytest.fixture(scope="module")
def stored(server):
    """``minimal.yaml`` as the server stored it (named ``minimal``): the old object of updates."""
    server.admitted(experiment("minimal"))
    return json.loads(server.kubectl("get", "rlx", "minimal", "-o", "json").stdout)


# --- installed as users install it --------------------------------------------------------------


def test_the_crds_install_server_side_from_crds_and_from_the_chart(control_plane):
    """Applying both copies and KubeRay's again changes nothing (the same schema, one field manager)."""

    def crds() -> dict[str, Any]:
        items = control_plane.kubectl_json("get", "crd", "-o", "json")["items"]
        return {item["metadata"]["name"]: item for item in items}

    before = {name: item["metadata"]["generation"] for name, item in crds().items()}
    try:
        chart = control_plane.kubectl_run("apply", "--server-side", "-f", str(CHART_CRDS), check=False)
    finally:  # the session's other tests run with crds/'s copy
        kuberay = [arg for path in kuberay_crd_files() for arg in ("-f", str(path))]
        ours = control_plane.kubectl_run("apply", "--server-side", "-f", str(CRDS), *kuberay, check=False)
    for done in (chart, ours):
        assert done.returncode == 0, done.stderr
        assert "serverside-applied" in done.stdout
        assert "Warning" not in done.stderr
    after = crds()
    assert {"rlexperiments.rltrainer.io", "rayclusters.ray.io"} <= set(after)
    assert {name: item["metadata"]["generation"] for name, item in after.items()} == before
    for item in after.values():
        conditions = {c["type"]: c["status"] for c in item["status"]["conditions"]}
        assert conditions["Established"] == conditions["NamesAccepted"] == "True", conditions


# --- defaults ------------------------------------------------------------------------------------


def test_the_server_fills_in_the_models_defaults(stored):
    from_models = ExperimentSpec.model_validate(load_manifest("minimal.yaml")["spec"]).model_dump(
        mode="json", exclude_none=True
    )
    assert stored["spec"] == from_models
    assert "status" not in stored  # the operator writes it


# --- good manifests -----------------------------------------------------------------------------


#: A sweep: a grid in config, PBT with nested settings (kept as written: preserve-unknown-fields).
SWEEP = {
    "config": {
        "lr": {"grid_search": [0.001, 0.0001]},
        "model": {"fcnet_hiddens": {"grid_search": [[32], [64]]}},
    },
    "tune": {
        "numSamples": 2,
        "maxConcurrentTrials": 4,
        "scheduler": "pbt",
        "schedulerConfig": {
            "perturbation_interval": 2,
            "hyperparam_mutations": {"lr": [0.001, 0.0003], "gamma": [0.95, 0.99]},
            "synch": True,
        },
        "metric": "episode_return_mean",
        "mode": "max",
    },
}


def _good_manifests() -> list[Any]:
    data = [pytest.param(load_manifest(p.name), id=p.name) for p in sorted(DATA.glob("*.yaml"))]
    examples = [
        pytest.param(doc, id=f"examples/{path.name}")
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "RLExperiment"
    ]
    variants = {
        # Nullable fields take null; null on a field with a default is dropped, then defaulted.
        "nulls": {
            "image": None,
            "activeDeadlineSeconds": None,
            "storage": {"credentialsSecretRef": None, "endpointURL": None},
            "learners": None,
            "suspend": None,
        },
        "integer-quantities": {"head": {"cpu": 4, "memory": 8589934592}, "learners": {"memory": 0}},
        "sweep": SWEEP,
    }
    inline = [pytest.param(experiment(name, patch), id=name) for name, patch in variants.items()]
    return data + examples + inline


@pytest.mark.parametrize("manifest", _good_manifests())
def test_good_manifests_are_admitted(server, manifest):
    """What the server would store is what the operator accepts (server-side dry run)."""
    manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": server.ns}}
    done = server.kubectl(
        "apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-", stdin=manifest
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr
    validate_experiment(json.loads(done.stdout))


# --- invalid manifests --------------------------------------------------------------------------

# id (also the object's name), spec patch (DELETE: remove), the field the server must name, and
# a fragment of its message.
INVALID = [
    # types
    ("replicas-string", {"rollouts": {"replicas": "two"}}, "spec.rollouts.replicas", "type integer"),
    ("suspend-string", {"suspend": "yes"}, "spec.suspend", "type boolean"),
    ("env-integer", {"env": 5}, "spec.env", "type string"),
    ("stop-value-string", {"stop": {"training_iteration": "ten"}}, "spec.stop.training_iteration", "number"),
    ("config-list", {"config": ["lr", 0.1]}, "spec.config", "type object"),
    ("learners-integer", {"learners": 3}, "spec.learners", "type object"),
    ("tolerations-string", {"learners": {"tolerations": "gpu"}}, "spec.learners.tolerations", "type array"),
    (
        "node-selector-integer",
        {"rollouts": {"nodeSelector": {"pool": 1}}},
        "spec.rollouts.nodeSelector.pool",
        "type string",
    ),
    # bounds
    (
        "replicas-negative",
        {"rollouts": {"replicas": -1}},
        "spec.rollouts.replicas",
        "greater than or equal to 0",
    ),
    (
        "replicas-too-many",
        {"rollouts": {"replicas": 1025}},
        "spec.rollouts.replicas",
        "less than or equal to 1024",
    ),
    (
        "learners-too-many",
        {"learners": {"replicas": 65}},
        "spec.learners.replicas",
        "less than or equal to 64",
    ),
    (
        "gpus-too-many",
        {"learners": {"gpusPerLearner": 9}},
        "spec.learners.gpusPerLearner",
        "less than or equal",
    ),
    (
        "learner-cpus-zero",
        {"learners": {"cpusPerLearner": 0}},
        "spec.learners.cpusPerLearner",
        "greater than",
    ),
    ("envs-too-many", {"rollouts": {"envsPerRunner": 4097}}, "spec.rollouts.envsPerRunner", "less than"),
    ("frequency-negative", {"checkpoint": {"frequency": -1}}, "spec.checkpoint.frequency", "greater than"),
    (
        "keep-zero",
        {"checkpoint": {"numToKeep": 0}},
        "spec.checkpoint.numToKeep",
        "greater than or equal to 1",
    ),
    (
        "backoff-too-high",
        {"faultTolerance": {"backoffLimit": 101}},
        "spec.faultTolerance.backoffLimit",
        "less",
    ),
    (
        "deadline-zero",
        {"activeDeadlineSeconds": 0},
        "spec.activeDeadlineSeconds",
        "greater than or equal to 1",
    ),
    ("ttl-negative", {"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished", "greater than"),
    (
        "toleration-seconds-negative",
        {"learners": {"tolerations": [{"key": "spot", "tolerationSeconds": -1}]}},
        "spec.learners.tolerations[0].tolerationSeconds",
        "greater than or equal to 0",
    ),
    # lengths
    ("env-empty", {"env": ""}, "spec.env", "at least 1 chars long"),
    ("image-empty", {"image": ""}, "spec.image", "at least 1 chars long"),
    (
        "toleration-value-too-long",
        {"rollouts": {"tolerations": [{"key": "spot", "value": "x" * 64}]}},
        "spec.rollouts.tolerations[0].value",
        "Too long",
    ),
    (
        "secret-key-empty",
        {"storage": {"credentialsSecretRef": {"name": "s3", "accessKeyIdKey": ""}}},
        "spec.storage.credentialsSecretRef.accessKeyIdKey",
        "at least 1 chars long",
    ),
    # enums
    ("algorithm-unknown", {"algorithm": "A2Z"}, "spec.algorithm", 'Unsupported value: "A2Z"'),
    (
        "toleration-effect",
        {"learners": {"tolerations": [{"key": "spot", "effect": "Sometimes"}]}},
        "spec.learners.tolerations[0].effect",
        "Unsupported value",
    ),
    (
        "toleration-operator",
        {"rollouts": {"tolerations": [{"key": "spot", "operator": "In"}]}},
        "spec.rollouts.tolerations[0].operator",
        "Unsupported value",
    ),
    # patterns
    ("uri-not-s3", {"checkpoint": {"uri": "gs://bucket/x"}}, "spec.checkpoint.uri", "should match"),
    ("uri-bad-bucket", {"checkpoint": {"uri": "s3://My_Bucket/x"}}, "spec.checkpoint.uri", "should match"),
    (
        "endpoint-not-a-url",
        {"storage": {"endpointURL": "minio:9000"}},
        "spec.storage.endpointURL",
        "should match",
    ),
    ("region-with-space", {"storage": {"region": "US East"}}, "spec.storage.region", "should match"),
    (
        "secret-name-not-dns",
        {"storage": {"credentialsSecretRef": {"name": "S3 creds"}}},
        "spec.storage.credentialsSecretRef.name",
        "should match",
    ),
    ("ray-version-latest", {"rayVersion": "latest"}, "spec.rayVersion", "should match"),
    # int-or-string quantities
    ("memory-not-a-quantity", {"head": {"memory": "lots"}}, "spec.head.memory", "should match"),
    ("cpu-fraction-number", {"head": {"cpu": 1.5}}, "spec.head.cpu", "must be of type integer,string"),
    (
        "memory-boolean",
        {"learners": {"memory": True}},
        "spec.learners.memory",
        "must be of type integer,string",
    ),
    ("cpu-negative-integer", {"head": {"cpu": -1}}, "spec.head.cpu", "greater than or equal to 0"),
    ("memory-too-long", {"rollouts": {"memory": "1" * 33}}, "spec.rollouts.memory", "Too long"),
    # unknown fields (kubectl's strict field validation)
    ("unknown-spec-field", {"replicas": 3}, "spec.replicas", "strict decoding error"),
    ("gpus-on-rollouts", {"rollouts": {"gpusPerRunner": 1}}, "spec.rollouts.gpusPerRunner", "unknown field"),
    (
        "unknown-toleration-field",
        {"learners": {"tolerations": [{"key": "spot", "keyy": "x"}]}},
        "spec.learners.tolerations[0].keyy",
        "unknown field",
    ),
    # required fields (null on a field that is not nullable is dropped first)
    ("no-spec", DELETE, "spec", "Required value"),
    ("no-algorithm", {"algorithm": DELETE}, "spec.algorithm", "Required value"),
    ("no-checkpoint", {"checkpoint": DELETE}, "spec.checkpoint", "Required value"),
    ("no-checkpoint-uri", {"checkpoint": {"uri": DELETE}}, "spec.checkpoint.uri", "Required value"),
    (
        "secret-ref-no-name",
        {"storage": {"credentialsSecretRef": {}}},
        "spec.storage.credentialsSecretRef.name",
        "Required",
    ),
    ("env-null", {"env": None}, "spec.env", "Required value"),
    ("toleration-null", {"learners": {"tolerations": [None]}}, "spec.learners.tolerations[0]", "type object"),
    # list and map limits
    ("stop-empty", {"stop": {}}, "spec.stop", "at least 1 properties"),
    ("stop-only-null", {"stop": {"training_iteration": None}}, "spec.stop", "at least 1 properties"),
    ("stop-too-many", {"stop": {f"key{i}": 1 for i in range(17)}}, "spec.stop", "must have at most 16 items"),
    (
        "tolerations-too-many",
        {"learners": {"tolerations": [{"key": f"key{i}"} for i in range(33)]}},
        "spec.learners.tolerations",
        "must have at most 32 items",
    ),
    # CEL rules
    (
        "toleration-without-key",
        {"rollouts": {"tolerations": [{"value": "x"}]}},  # operator defaults to Equal
        "spec.rollouts.tolerations[0].key",
        EMPTY_KEY_NEEDS_EXISTS,
    ),
    (
        "toleration-exists-with-value",
        {"learners": {"tolerations": [{"key": "spot", "operator": "Exists", "value": "x"}]}},
        "spec.learners.tolerations[0].value",
        EXISTS_TAKES_NO_VALUE,
    ),
    (
        "gpus-without-learners",
        {"learners": {"replicas": 0, "gpusPerLearner": 1}},
        "spec.learners.gpusPerLearner",
        GPUS_NEED_LEARNERS,
    ),
    ("stop-key-empty", {"stop": {"": 3, "training_iteration": 10}}, "spec.stop", STOP_KEYS_NON_EMPTY),
    # sweeps
    (
        "tune-scheduler-unknown",
        {"tune": {"scheduler": "hyperband"}},
        "spec.tune.scheduler",
        'Unsupported value: "hyperband"',
    ),
    ("tune-samples-zero", {"tune": {"numSamples": 0}}, "spec.tune.numSamples", "greater than or equal to 1"),
    (
        "tune-concurrency-zero",
        {"tune": {"maxConcurrentTrials": 0}},
        "spec.tune.maxConcurrentTrials",
        "greater than or equal to 1",
    ),
    ("tune-mode-unknown", {"tune": {"mode": "maximize"}}, "spec.tune.mode", 'Unsupported value: "maximize"'),
    ("tune-metric-empty", {"tune": {"metric": ""}}, "spec.tune.metric", "at least 1 chars long"),
    (
        "tune-scheduler-config-list",
        {"tune": {"schedulerConfig": [1]}},
        "spec.tune.schedulerConfig",
        "type object",
    ),
    ("tune-unknown-field", {"tune": {"samples": 4}}, "spec.tune.samples", "unknown field"),
    ("tune-string", {"tune": "asha"}, "spec.tune", "type object"),
]


@pytest.mark.parametrize(
    ("name", "patch", "path", "fragment"), [pytest.param(row[0], *row[1:], id=row[0]) for row in INVALID]
)
def test_invalid_manifests_are_rejected_naming_the_field(server, name, patch, path, fragment):
    message = rejected(server.create(experiment(name, patch)))
    assert names_field(message, path), message
    assert fragment in message, message


def _condition(**fields: str) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "RayClusterReady",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        **fields,
    }


# id, merge patch (through the status subresource when it is a status), field, message fragment
INVALID_UPDATES = [
    ("algorithm-changed", {"spec": {"algorithm": "DQN"}}, "spec.algorithm", "algorithm is immutable"),
    ("env-changed", {"spec": {"env": "Pendulum-v1"}}, "spec.env", "env is immutable"),
    ("replicas-negative", {"spec": {"rollouts": {"replicas": -1}}}, "spec.rollouts.replicas", "greater than"),
    ("phase-unknown", {"status": {"phase": "Exploding"}}, "status.phase", 'Unsupported value: "Exploding"'),
    (
        "condition-status-maybe",
        {"status": {"conditions": [_condition(status="Maybe")]}},
        "status.conditions[0].status",
        "Unsupported value",
    ),
    (
        "condition-twice",
        {"status": {"conditions": [_condition(), _condition()]}},
        "status.conditions[1]",
        "Duplicate value",
    ),
]


@pytest.mark.parametrize(
    ("patch", "path", "fragment"), [pytest.param(*row[1:], id=row[0]) for row in INVALID_UPDATES]
)
def test_invalid_updates_are_rejected_naming_the_field(server, stored, patch, path, fragment):
    message = rejected(server.patch(stored["metadata"]["name"], patch))
    assert names_field(message, path), message
    assert fragment in message, message


# --- CEL rules: each admits a good object -------------------------------------------------------

# rule message, spec patch of a good object; for transition rules a merge patch of ``stored``.
CEL_GOOD = [
    (EMPTY_KEY_NEEDS_EXISTS, {"rollouts": {"tolerations": [{"operator": "Exists"}]}}),
    (
        EXISTS_TAKES_NO_VALUE,
        {
            "learners": {
                "tolerations": [{"key": "spot", "operator": "Exists"}, {"key": "pool", "value": "rl"}]
            }
        },
    ),
    (GPUS_NEED_LEARNERS, {"learners": {"replicas": 0}}),
    (STOP_KEYS_NON_EMPTY, {"stop": {"episode_return_mean": 450, "training_iteration": 10}}),
    ("algorithm is immutable", {"spec": {"algorithm": "PPO", "suspend": True}}),
    ("env is immutable", {"spec": {"env": "CartPole-v1", "rollouts": {"replicas": 8}}}),
]


@pytest.mark.parametrize("patch", [pytest.param(patch, id=rule[:40]) for rule, patch in CEL_GOOD])
def test_cel_rules_admit_good_objects(server, stored, patch):
    if "spec" in patch:  # a transition rule: an update that keeps the field
        done = server.patch(stored["metadata"]["name"], patch, dry_run=True)
        assert done.returncode == 0, done.stderr
    else:
        server.admitted(experiment("cel-good", patch), dry_run=True)


def test_every_cel_rule_has_a_good_and_a_bad_case():
    rules = {
        rule["message"]
        for _, node in walk(openapi_schema())
        for rule in node.get("x-kubernetes-validations", [])
    }
    assert rules == {rule for rule, _ in CEL_GOOD}
    bad = {row[-1] for row in INVALID + INVALID_UPDATES}
    assert rules <= bad, rules - bad
    assert len(INVALID) + len(INVALID_UPDATES) >= 40
    assert len({row[0] for row in INVALID}) == len(INVALID)


# --- kubectl get and explain --------------------------------------------------------------------


def test_kubectl_get_prints_the_columns_by_every_name(server):
    server.admitted(experiment("columns"))
    status = ExperimentStatus.model_validate(
        {
            "phase": "Running",
            "conditions": [_condition(type="Running", reason="JobRunning")],
            "iteration": 12,
            "episodeReturnMean": 21.5,
            "restarts": 1,
        }
    ).model_dump(mode="json")  # as the operator writes it, unset fields null
    done = server.patch("columns", {"status": status})
    assert done.returncode == 0, done.stderr
    # The status belongs to the subresource: a write through the main resource leaves it.
    assert (
        server.kubectl(
            "patch", "rlx", "columns", "--type=merge", "-p", '{"status":{"phase":"Failed"}}'
        ).returncode
        == 0
    )

    header = [column["name"].upper() for column in crd.PRINTER_COLUMNS if not column.get("priority")]
    wide = server.kubectl("get", "rlx", "-o", "wide")  # adds the priority-1 columns (a sweep's Best)
    assert wide.returncode == 0 and wide.stdout.split()[7] == "BEST", wide.stdout + wide.stderr
    for resource in ("rlx", "rlexperiments", "rlexperiment.rltrainer.io", "rltrainer"):
        done = server.kubectl("get", resource)
        assert done.returncode == 0, done.stderr
        lines = [line.split() for line in done.stdout.splitlines()]
        assert lines[0] == ["NAME", *header], resource
        (row,) = [line for line in lines[1:] if line[0].endswith("columns")]
        assert row[1:-1] == ["Running", "PPO", "CartPole-v1", "12", "21.5", "1"], resource


def test_kubectl_explain_shows_the_models_docstrings(server):
    done = server.kubectl("explain", "rlexperiment.spec.learners")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())

    def doc(description: str | None) -> str:
        assert description, "a field without a docstring"
        return " ".join(description.replace("``", "`").split())

    assert doc(ExperimentSpec.model_fields["learners"].description) in text
    for name, field in Learners.model_fields.items():
        assert f"{name} <" in text, name
        assert doc(field.description) in text, name


# --- sweeps ------------------------------------------------------------------------------------


def test_a_sweep_is_stored_with_its_defaults_and_settings_as_written(server):
    stored = server.admitted(experiment("sweep-defaults", {"tune": {"numSamples": 3}}), dry_run=True)
    assert stored["spec"]["tune"] == {
        "numSamples": 3,
        "scheduler": "fifo",
        "schedulerConfig": {},
        "metric": "episode_return_mean",
        "mode": "max",
    }
    assert stored["spec"]["tune"] == ExperimentSpec.model_validate(stored["spec"]).tune.model_dump(
        exclude_none=True
    )
    stored = server.admitted(experiment("sweep-pbt", SWEEP), dry_run=True)
    assert stored["spec"]["tune"] == SWEEP["tune"]  # nested settings kept, nothing pruned
    assert stored["spec"]["config"]["lr"] == {"grid_search": [0.001, 0.0001]}
    assert "tune" not in server.admitted(experiment("no-sweep"), dry_run=True)["spec"]  # no default


def test_a_sweeps_status_is_accepted_by_the_status_subresource(server):
    server.admitted(experiment("sweep-status", SWEEP))
    status = ExperimentStatus.model_validate(
        {
            "phase": "Running",
            "trials": {"running": 1, "pending": 1, "terminated": 2},
            "bestTrial": "PPO_CartPole-v1_5d0c4_00001",
            "bestMetric": 187.5,
            "bestCheckpoint": "s3://checkpoints/rl/ns/sweep-status/PPO_CartPole-v1_5d0c4_00001/checkpoint_000004",
        }
    ).model_dump(mode="json")  # as the operator writes it
    done = server.patch("sweep-status", {"status": status})
    assert done.returncode == 0, done.stderr
    got = json.loads(server.kubectl("get", "rlx", "sweep-status", "-o", "json").stdout)["status"]
    assert got["trials"] == {"pending": 1, "running": 1, "paused": 0, "terminated": 2, "errored": 0}
    assert (got["bestTrial"], got["bestMetric"]) == ("PPO_CartPole-v1_5d0c4_00001", 187.5)
    assert got["bestCheckpoint"].endswith("/checkpoint_000004")
    message = rejected(server.patch("sweep-status", {"status": {"trials": {"running": -1}}}))
    assert names_field(message, "status.trials.running"), message
