"""Spec validation: bad manifests are rejected by the CRD's schema or by ``validate_experiment``.

Each row of ``INVALID`` says which layer must catch it: ``schema`` rows are rejected by the
real API server (a server-side dry run on the session's control plane) *and* by the operator's
models (one source of truth, the same rules); ``operator`` rows pass the schema (it cannot know
rltrainer's config keys or result names) and are rejected by ``validate_experiment`` with a
message naming the field.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
from pydantic import BaseModel

from rltrainer.algorithms.algorithm_config import ALIASES, AlgorithmConfig
from rltrainer_operator.models import ExperimentSpec
from rltrainer_operator.validation import OWNED_CONFIG_KEYS, InvalidSpec, validate_experiment

try:  # tests/operator is a package
    from .test_crd_server import DELETE, api_namespace, load_manifest, merge_spec, names_field
except ImportError:  # pytest's rootdir-relative import
    from test_crd_server import DELETE, api_namespace, load_manifest, merge_spec, names_field


def patched(patch: dict[str, Any], base: str = "minimal.yaml") -> dict[str, Any]:
    """``base`` with ``patch`` merged into its spec (``DELETE`` removes a key)."""
    return merge_spec(load_manifest(base), patch)


SCHEMA, OPERATOR = "schema", "operator"

# id, spec patch, layer, expected field path, expected message fragment (validate_experiment's)
INVALID = [
    ("unknown-algorithm", {"algorithm": "A2Z"}, SCHEMA, "spec.algorithm", "unknown algorithm 'A2Z'"),
    ("missing-algorithm", {"algorithm": DELETE}, SCHEMA, "spec.algorithm", "is required"),
    ("missing-env", {"env": DELETE}, SCHEMA, "spec.env", "is required"),
    ("empty-env", {"env": ""}, SCHEMA, "spec.env", "at least 1 character"),
    ("missing-checkpoint", {"checkpoint": DELETE}, SCHEMA, "spec.checkpoint", "is required"),
    ("bad-s3-uri", {"checkpoint": {"uri": "https://bucket/x"}}, SCHEMA, "spec.checkpoint.uri", "s3://bucket"),
    (
        "s3-uri-bad-bucket",
        {"checkpoint": {"uri": "s3://My_Bucket/x"}},
        SCHEMA,
        "spec.checkpoint.uri",
        "s3://",
    ),
    (
        "negative-checkpoint-frequency",
        {"checkpoint": {"frequency": -1}},
        SCHEMA,
        "spec.checkpoint.frequency",
        ">= 0",
    ),
    ("zero-num-to-keep", {"checkpoint": {"numToKeep": 0}}, SCHEMA, "spec.checkpoint.numToKeep", ">= 1"),
    ("negative-rollout-replicas", {"rollouts": {"replicas": -1}}, SCHEMA, "spec.rollouts.replicas", ">= 0"),
    (
        "gpus-on-rollouts",
        {"rollouts": {"gpusPerRunner": 1}},
        SCHEMA,
        "spec.rollouts.gpusPerRunner",
        "unknown field",
    ),
    (
        "zero-cpus-per-runner",
        {"rollouts": {"cpusPerRunner": 0}},
        SCHEMA,
        "spec.rollouts.cpusPerRunner",
        "> 0",
    ),
    ("too-many-gpus", {"learners": {"gpusPerLearner": 9}}, SCHEMA, "spec.learners.gpusPerLearner", "<= 8"),
    (
        "gpus-without-learners",
        {"learners": {"replicas": 0, "gpusPerLearner": 1}},
        SCHEMA,
        "spec.learners",
        "gpusPerLearner needs replicas >= 1",
    ),
    ("bad-memory", {"learners": {"memory": "lots"}}, SCHEMA, "spec.learners.memory", "Kubernetes quantity"),
    ("fractional-cpu-number", {"head": {"cpu": 1.5}}, SCHEMA, "spec.head.cpu", "valid string"),
    (
        "bad-toleration-effect",
        {"learners": {"tolerations": [{"key": "a", "effect": "Sometimes"}]}},
        SCHEMA,
        "spec.learners.tolerations[0].effect",
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
    ),
    (
        "toleration-without-key",
        {"rollouts": {"tolerations": [{"operator": "Equal", "value": "x"}]}},
        SCHEMA,
        "spec.rollouts.tolerations[0]",
        "empty key needs operator Exists",
    ),
    (
        "toleration-exists-with-value",
        {"rollouts": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}},
        SCHEMA,
        "spec.rollouts.tolerations[0]",
        "operator Exists takes no value",
    ),
    (
        "unknown-spec-field",
        {"replicas": 3},
        SCHEMA,
        "spec.replicas",
        "unknown field; allowed: algorithm, env",
    ),
    (
        "negative-backoff-limit",
        {"faultTolerance": {"backoffLimit": -1}},
        SCHEMA,
        "spec.faultTolerance.backoffLimit",
        ">= 0",
    ),
    ("zero-deadline", {"activeDeadlineSeconds": 0}, SCHEMA, "spec.activeDeadlineSeconds", ">= 1"),
    ("no-stop-criteria", {"stop": {}}, SCHEMA, "spec.stop", "at least 1 item"),
    ("empty-stop-key", {"stop": {"": 10}}, SCHEMA, "spec.stop", "stop keys must be non-empty"),
    (
        "stop-value-not-a-number",
        {"stop": {"training_iteration": "ten"}},
        SCHEMA,
        "spec.stop.training_iteration",
        "number",
    ),
    (
        "secret-ref-without-name",
        {"storage": {"credentialsSecretRef": {}}},
        SCHEMA,
        "spec.storage.credentialsSecretRef.name",
        "is required",
    ),
    (
        "bad-endpoint-url",
        {"storage": {"endpointURL": "minio:9000"}},
        SCHEMA,
        "spec.storage.endpointURL",
        "http:// or https:// URL",
    ),
    ("bad-ray-version", {"rayVersion": "latest"}, SCHEMA, "spec.rayVersion", "a Ray version such as 2.60.0"),
    ("config-not-a-map", {"config": ["lr", 0.1]}, SCHEMA, "spec.config", "valid dictionary"),
    (
        "unknown-config-key",
        {"config": {"learning_rate": 0.1}},
        OPERATOR,
        "spec.config.learning_rate",
        "unknown PPO config key",
    ),
    (
        "misspelled-config-key",
        {"config": {"gama": 0.9}},
        OPERATOR,
        "spec.config.gama",
        "did you mean 'gamma'?",
    ),
    (
        "config-bad-value",
        {"config": {"gamma": 2.0}},
        OPERATOR,
        "spec.config.gamma",
        "less than or equal to 1",
    ),
    (
        "config-wrong-type",
        {"config": {"train_batch_size": "big"}},
        OPERATOR,
        "spec.config.train_batch_size",
        "valid integer",
    ),
    (
        "config-inconsistent",
        {"config": {"minibatch_size": 8192}},
        OPERATOR,
        "spec.config",
        "minibatch_size (8192) must be <= train_batch_size",
    ),
    (
        "config-owns-env-runners",
        {"config": {"num_env_runners": 4}},
        OPERATOR,
        "spec.config.num_env_runners",
        "spec.rollouts.replicas",
    ),
    (
        "config-owns-rllib-alias",
        {"config": {"num_workers": 4}},
        OPERATOR,
        "spec.config.num_workers",
        "spec.rollouts.replicas",
    ),
    (
        "config-owns-learner-gpus",
        {"config": {"num_gpus_per_learner": 1}},
        OPERATOR,
        "spec.config.num_gpus_per_learner",
        "spec.learners.gpusPerLearner",
    ),
    (
        "config-owns-storage",
        {"config": {"storage_path": "s3://b/p"}},
        OPERATOR,
        "spec.config.storage_path",
        "spec.checkpoint.uri",
    ),
    ("config-owns-env", {"config": {"env": "Pendulum-v1"}}, OPERATOR, "spec.config.env", "spec.env"),
    (
        "config-unknown-exploration",
        {"config": {"exploration_config": {"type": "Curiousity"}}},
        OPERATOR,
        "spec.config.exploration_config",
        "unknown exploration_config type 'Curiousity'",
    ),
    (
        "unknown-stop-key",
        {"stop": {"reward": 100}},
        OPERATOR,
        "spec.stop.reward",
        "unknown stop key 'reward'",
    ),
    ("env-config-not-json", {"envConfig": {"scale": math.inf}}, OPERATOR, "spec.envConfig", "plain JSON"),
    # sweeps (spec.tune, search spaces in spec.config)
    (
        "tune-unknown-scheduler",
        {"tune": {"scheduler": "hyperband"}},
        SCHEMA,
        "spec.tune.scheduler",
        "hyperband",
    ),
    ("tune-zero-samples", {"tune": {"numSamples": 0}}, SCHEMA, "spec.tune.numSamples", ">= 1"),
    (
        "tune-zero-concurrency",
        {"tune": {"maxConcurrentTrials": 0}},
        SCHEMA,
        "spec.tune.maxConcurrentTrials",
        ">= 1",
    ),
    ("tune-bad-mode", {"tune": {"mode": "maximize"}}, SCHEMA, "spec.tune.mode", "'max' or 'min'"),
    ("tune-unknown-field", {"tune": {"samples": 4}}, SCHEMA, "spec.tune.samples", "unknown field"),
    (
        "sweep-grid-value-rejected",
        {"config": {"lr": {"grid_search": [0.001, -1]}}},
        OPERATOR,
        "spec.config.lr",
        "the search space of 'lr' can take -1, which is not allowed",
    ),
    (
        "sweep-grid-empty",
        {"config": {"lr": {"grid_search": []}}},
        OPERATOR,
        "spec.config.lr",
        "a grid_search takes a non-empty list of values",
    ),
    (
        "sweep-grid-key-unknown",
        {"config": {"learning_rate": {"grid_search": [0.001, 0.0001]}}},
        OPERATOR,
        "spec.config.learning_rate",
        "unknown PPO config key",
    ),
    (
        "sweep-grid-on-owned-key",
        {"config": {"num_env_runners": {"grid_search": [1, 2]}}},
        OPERATOR,
        "spec.config.num_env_runners",
        "spec.rollouts.replicas",
    ),
    (
        "sweep-trial-inconsistent",
        {"config": {"train_batch_size": {"grid_search": [4000, 128]}, "minibatch_size": 256}},
        OPERATOR,
        "spec.config",
        "must be <= train_batch_size (128): lower minibatch_size or raise train_batch_size (in the "
        "trial with train_batch_size=128)",
    ),
    (
        "sweep-unknown-metric",
        {"config": {"lr": {"grid_search": [0.001, 0.0001]}}, "tune": {"metric": "episode_reward_meen"}},
        OPERATOR,
        "spec.tune.metric",
        "unknown metric 'episode_reward_meen': no result has it; did you mean episode_return_mean",
    ),
    (
        "sweep-unknown-scheduler-setting",
        {"tune": {"scheduler": "asha", "schedulerConfig": {"max_iterations": 10}}},
        OPERATOR,
        "spec.tune.schedulerConfig.max_iterations",
        "asha scheduler: unknown setting(s) ['max_iterations']; allowed: max_t, grace_period",
    ),
    (
        "sweep-fifo-takes-no-settings",
        {"tune": {"numSamples": 2, "schedulerConfig": {"max_t": 10}}},
        OPERATOR,
        "spec.tune.schedulerConfig.max_t",
        "allowed: none",
    ),
    (
        "sweep-pbt-without-mutations",
        {"tune": {"scheduler": "pbt"}},
        OPERATOR,
        "spec.tune.schedulerConfig.hyperparam_mutations",
        "set hyperparam_mutations",
    ),
    (
        "sweep-pbt-mutates-unknown-key",
        {"tune": {"scheduler": "pbt", "schedulerConfig": {"hyperparam_mutations": {"lrr": [0.1, 0.01]}}}},
        OPERATOR,
        "spec.tune.schedulerConfig.hyperparam_mutations.lrr",
        "unknown PPO config key (did you mean 'lr'?)",
    ),
    (
        "sweep-pbt-mutates-to-a-bad-value",
        {"tune": {"scheduler": "pbt", "schedulerConfig": {"hyperparam_mutations": {"gamma": [0.9, 1.5]}}}},
        OPERATOR,
        "spec.tune.schedulerConfig.hyperparam_mutations.gamma",
        "invalid value for 'gamma'",
    ),
    (
        "sweep-pbt-mutates-an-owned-key",
        {"tune": {"scheduler": "pbt", "schedulerConfig": {"hyperparam_mutations": {"num_workers": [1, 2]}}}},
        OPERATOR,
        "spec.tune.schedulerConfig.hyperparam_mutations.num_workers",
        "is set by spec.rollouts.replicas",
    ),
    (
        "tune-without-a-sweep",
        {"tune": {"metric": "episode_len_mean"}},
        OPERATOR,
        "spec.tune",
        "makes no sweep",
    ),
]


@pytest.mark.parametrize(
    ("patch", "path", "fragment"), [pytest.param(row[1], *row[3:], id=row[0]) for row in INVALID]
)
def test_invalid_manifests_are_rejected(patch, path, fragment):
    manifest = patched(patch)
    with pytest.raises(InvalidSpec) as caught:
        validate_experiment(manifest)
    assert caught.value.field == path
    assert fragment in caught.value.message
    assert str(caught.value) == f"{path}: {caught.value.message}"
    assert "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def server(control_plane):
    with api_namespace(control_plane, "validation") as api:
        yield api


def _sendable(patch: dict[str, Any]) -> bool:
    """Whether a request can carry the manifest (JSON has no infinity)."""
    try:
        json.dumps(patched(patch), allow_nan=False)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("patch", "layer", "path"), [pytest.param(*row[1:4], id=row[0]) for row in INVALID if _sendable(row[1])]
)
def test_the_api_server_rejects_the_schema_rows_and_admits_the_others(server, patch, layer, path):
    done = server.create(patched(patch), dry_run=True)
    if layer == SCHEMA:  # rejected naming the operator's field, or a field under it (a CEL rule's fieldPath)
        assert done.returncode != 0, f"admitted: {path}"
        assert names_field(done.stderr, path, or_below=True), done.stderr
    else:
        assert done.returncode == 0, done.stderr


def test_there_are_at_least_twenty_invalid_manifests():
    assert len(INVALID) >= 20
    assert len({row[0] for row in INVALID}) == len(INVALID)


@pytest.mark.parametrize("name", ["minimal.yaml", "full.yaml"])
def test_valid_manifests_are_accepted(name):
    manifest = load_manifest(name)
    experiment = validate_experiment(manifest)
    assert experiment.spec.env == manifest["spec"]["env"]  # the API server's view: test_crd_server.py


def _unset_fields(model: type[BaseModel], values: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        if name not in values:
            missing.append(f"{path}.{name}")
            continue
        nested = next(
            (a for a in (field.annotation, *getattr(field.annotation, "__args__", ())) if _is_model(a)), None
        )
        if nested is not None and isinstance(values[name], dict):
            missing += _unset_fields(nested, values[name], f"{path}.{name}")
    return missing


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_full_manifest_sets_every_spec_field():
    assert _unset_fields(ExperimentSpec, load_manifest("full.yaml")["spec"], "spec") == []


def test_minimal_manifest_gets_the_defaults():
    spec = validate_experiment(load_manifest("minimal.yaml")).spec
    assert spec.stop == {"training_iteration": 100}
    assert (spec.rollouts.replicas, spec.learners.replicas, spec.learners.gpusPerLearner) == (2, 1, 0)
    assert spec.storage.credentialsSecretRef is None
    assert spec.checkpoint.atEnd is True


def test_int_quantities_read_as_strings():
    spec = validate_experiment(patched({"head": {"cpu": 4}, "learners": {"memory": 8}})).spec
    assert (spec.head.cpu, spec.learners.memory) == ("4", "8")


def test_rllib_spellings_of_stop_keys_and_config_keys_are_accepted():
    manifest = patched(
        {"stop": {"env_runners/episode_reward_mean": 200}, "config": {"lambda": 0.9, "num_sgd_iter": 5}}
    )
    validate_experiment(manifest)


def test_rllib_tuned_example_keys_act_or_say_why():
    switches = {"enable_connectors": True, "vf_share_layers": True, "lr_schedule": [[0, 1e-3], [100, 1e-4]]}
    validate_experiment(patched({"config": switches}))
    refused = r"spec\.config\.soft_horizon: .*episodes end when the env ends them"
    with pytest.raises(InvalidSpec, match=refused):
        validate_experiment(patched({"config": {"soft_horizon": True}}))


@pytest.mark.parametrize(
    "key",
    sorted(OWNED_CONFIG_KEYS) + sorted(alias for alias, name in ALIASES.items() if name in OWNED_CONFIG_KEYS),
)
def test_every_config_key_the_spec_owns_is_rejected_with_a_pointer(key):
    name = ALIASES.get(key, key)
    with pytest.raises(InvalidSpec) as caught:
        validate_experiment(patched({"config": {key: 1}}))
    assert caught.value.field == f"spec.config.{key}"
    assert caught.value.message.startswith(f"is set by {OWNED_CONFIG_KEYS[name]}")


def test_owned_keys_are_real_config_keys():
    assert set(OWNED_CONFIG_KEYS) <= set(AlgorithmConfig.model_fields)


@pytest.mark.parametrize(
    "config",
    [
        {"exploration_config": {"type": "my_project.exploration:Curious", "beta": 0.2}},
        {"callbacks_class": "my_project.callbacks:Metrics"},
        {"callbacks": ["my_project.callbacks:Metrics", "my_project.callbacks.Other"]},
        {"logger_config": {"type": ["json", "my_project.loggers:Wandb"]}},
        {"env_task_fn": "my_project.curriculum:next_level"},
        {"custom_evaluation_function": "my_project.evaluation:evaluate"},
    ],
)
def test_user_classes_and_functions_are_left_to_the_driver(config):
    """They live in the trainer image: the operator must not import them."""
    validate_experiment(patched({"config": config}))


def test_evaluation_runners_are_not_provisioned_and_say_so():
    with pytest.raises(InvalidSpec) as err:
        validate_experiment(patched({"config": {"evaluation_num_env_runners": 2}}))
    assert err.value.field == "spec.config.evaluation_num_env_runners"
    assert "leave it 0" in str(err.value)


def test_validation_leaves_the_rltrainer_logger_alone():
    logger = logging.getLogger("rltrainer")
    before = logger.level
    validate_experiment(patched({"config": {"log_level": "DEBUG"}}))
    assert logger.level == before


def test_a_body_without_spec_names_spec():
    with pytest.raises(InvalidSpec, match=r"^spec: is required$"):
        validate_experiment({"apiVersion": "rltrainer.io/v1alpha1", "kind": "RLExperiment", "metadata": {}})


def test_several_problems_are_counted_on_one_line():
    with pytest.raises(InvalidSpec) as caught:
        validate_experiment(patched({"rollouts": {"replicas": -1, "cpusPerRunner": 0}}))
    assert caught.value.message.endswith("(and 1 more problem)")


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"config": {"vf_clip_param": None}}, "spec.config.vf_clip_param"),
        (
            {"config": {"model": {"fcnet_hiddens": [32], "fcnet_activation": None}}},
            "spec.config.model.fcnet_activation",
        ),
        ({"envConfig": {"max_steps": None}}, "spec.envConfig.max_steps"),
    ],
    ids=["config-key", "nested-config-key", "env-config-key"],
)
def test_a_null_that_kubectl_apply_dropped_is_reported_not_trained_on(server, patch, path):
    """kubectl apply deletes null fields (seen on the real API server): the driver would run with
    the default. The manifest as written, in apply's annotation, still has the null."""
    manifest = patched(patch)
    manifest = {**manifest, "metadata": {**manifest["metadata"], "name": "nulls", "namespace": server.ns}}
    done = server.kubectl("apply", "-f", "-", "-o", "json", stdin=manifest)
    try:
        assert done.returncode == 0, done.stderr
        stored = json.loads(done.stdout)
        leaf = path.rsplit(".", 1)[1]
        assert leaf not in json.dumps(stored["spec"]), "the server kept the null: the check is moot"
        with pytest.raises(InvalidSpec) as caught:
            validate_experiment(stored)
        assert caught.value.field == path
        assert "kubectl apply drops null fields" in caught.value.message
        # Removing the key (to mean the default) is accepted.
        del manifest["metadata"]["namespace"]
        fixed = json.loads(json.dumps(manifest), object_hook=_without_nulls)
        done = server.kubectl("apply", "-f", "-", "-o", "json", stdin=fixed)
        assert done.returncode == 0, done.stderr
        validate_experiment(json.loads(done.stdout))
    finally:
        server.kubectl("delete", "rlx", "nulls", "--wait=false")


def _without_nulls(mapping: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}


def test_a_null_the_live_spec_still_has_a_value_for_is_fine():
    manifest = patched({"config": {"vf_clip_param": 5.0}})
    applied = {"spec": {**manifest["spec"], "config": {"vf_clip_param": None}}}
    manifest["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)
    }
    validate_experiment(manifest)  # patched after apply: the live value is what runs
    manifest["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "not json"}
    validate_experiment(manifest)


def test_a_documented_setting_rltrainer_cannot_honour_says_why():
    with pytest.raises(InvalidSpec) as err:
        validate_experiment(patched({"config": {"soft_horizon": True}}))
    assert err.value.field == "spec.config.soft_horizon"
    assert "episodes end when the env ends them" in str(err.value)
    validate_experiment(patched({"config": {"create_env_on_driver": True}}))


@pytest.mark.parametrize(
    "patch",
    [
        {"config": {"lr": {"grid_search": [0.001, 0.0001]}}},
        {"config": {"model": {"fcnet_hiddens": {"grid_search": [[32], [64, 64]]}}}},
        {"envConfig": {"max_episode_steps": {"grid_search": [200, 500]}}},
        {"tune": {"numSamples": 3, "metric": "env_runners/episode_reward_mean"}},
        {
            "config": {"lr": {"grid_search": [0.001, 0.0001]}},
            "tune": {"scheduler": "asha", "schedulerConfig": {"max_t": 50, "grace_period": 5}},
        },
        {
            "tune": {
                "numSamples": 4,
                "scheduler": "pbt",
                "schedulerConfig": {"perturbation_interval": 2, "hyperparam_mutations": {"lr": [1e-3, 1e-4]}},
                "metric": "episode_len_mean",
                "mode": "min",
            }
        },
    ],
    ids=["grid", "nested-grid", "env-config-grid", "samples", "asha", "pbt"],
)
def test_sweeps_are_accepted(patch):
    """Search spaces (each value checked) and spec.tune pass, as the driver's check_sweep passes them."""
    validate_experiment(patched(patch))
