"""Pure builders: golden files for the RayCluster and the driver's job; every RayCluster is
admitted by the real API server with KubeRay's CRD (a server-side dry run, strict field validation).

Inputs are ``data/builders/<case>.input.yaml`` (an RLExperiment's metadata and spec); the
expected RayCluster is ``<case>.raycluster.yaml`` next to it. ``UPDATE_GOLDEN=1`` rewrites the
expected files after a deliberate change (review the diff).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from rltrainer.algorithms.registry import get_algorithm_class
from rltrainer.cli import build_parser
from rltrainer_operator import sweep
from rltrainer_operator.builders import job
from rltrainer_operator.builders.naming import MAX_CLUSTER_NAME, job_id, raycluster_name
from rltrainer_operator.builders.raycluster import (
    ClusterShape,
    build_raycluster,
    cluster_shape,
    cpu_count,
    cpu_quantity,
    scale_patch,
    worker_replicas,
)
from rltrainer_operator.models import RLExperiment
from rltrainer_operator.settings import Settings

DATA = Path(__file__).parent / "data" / "builders"
CASES = sorted(p.name.removesuffix(".input.yaml") for p in DATA.glob("*.input.yaml"))
SETTINGS = Settings()


def load(case: str) -> tuple[dict, RLExperiment]:
    body = yaml.safe_load((DATA / f"{case}.input.yaml").read_text())
    return body, RLExperiment.model_validate(body)


@pytest.mark.parametrize("case", CASES)
def test_raycluster_matches_golden_file(case):
    body, experiment = load(case)
    built = build_raycluster(body, experiment.spec, SETTINGS)
    golden = DATA / f"{case}.raycluster.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(yaml.safe_dump(built, sort_keys=False))
    assert built == yaml.safe_load(golden.read_text())


@pytest.mark.parametrize("case", CASES)
def test_raycluster_is_admitted_by_the_api_server(case, kube):
    body, experiment = load(case)
    built = build_raycluster(body, experiment.spec, SETTINGS)
    built["metadata"]["namespace"] = kube.ns
    # A server-side dry run: KubeRay's schema, defaults and rules, and unknown fields rejected.
    stored = kube.client.create_namespaced_custom_object(
        "ray.io", "v1", kube.ns, "rayclusters", built, dry_run="All", field_validation="Strict"
    )
    assert stored["spec"]["workerGroupSpecs"][0]["groupName"] == "learners"


def test_gpu_learners_request_gpus_and_advertise_the_learner_resource():
    body, experiment = load("gpu_learners")
    built = build_raycluster(body, experiment.spec, SETTINGS)
    groups = {g["groupName"]: g for g in built["spec"]["workerGroupSpecs"]}
    learner = groups["learners"]
    assert learner["replicas"] == 2
    assert learner["rayStartParams"] == {
        "num-cpus": "4",
        "num-gpus": "1",
        "resources": '"{\\"rltrainer_learner\\": 1}"',
    }
    resources = learner["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "1"
    rollouts = groups["rollouts"]
    assert "num-gpus" not in rollouts["rayStartParams"]
    assert "nvidia.com/gpu" not in rollouts["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert built["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert "team" not in built["metadata"]["labels"]  # only the Kueue label is propagated


def test_credentials_are_passed_by_reference_only():
    body, experiment = load("node_selectors_tolerations")
    built = build_raycluster(body, experiment.spec, SETTINGS)
    env = built["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {e["name"]: e for e in env}
    assert by_name["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "minio-credentials",
        "key": "access-key",
    }
    assert all("value" not in e for e in env if e["name"].startswith("AWS_ACCESS") or "SECRET" in e["name"])
    assert by_name["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"


@pytest.mark.parametrize("case", CASES)
def test_driver_config_passes_rltrainer_validation(case):
    _, experiment = load(case)
    config = job.driver_config(experiment.spec, SETTINGS)
    algo_config = get_algorithm_class(experiment.spec.algorithm).config_class()
    algo_config.update_from_dict(config)  # raises ConfigError on any bad key or type
    assert algo_config.num_env_runners == experiment.spec.rollouts.replicas
    assert algo_config.num_learners == experiment.spec.learners.replicas


def test_entrypoint_runs_rltrainer_with_the_spec():
    body, experiment = load("gpu_learners")
    command = job.entrypoint(experiment.spec, "research", "humanoid-ppo", SETTINGS, resume_from="s3://x/ckpt")
    args = shlex.split(command)
    assert args[:2] == ["rltrainer", "train"]
    flags = dict(zip(args[2::2], args[3::2], strict=False))
    assert flags["--algo"] == "PPO" and flags["--env"] == "Humanoid-v5"
    assert (
        flags["--storage-path"] == "s3://rl-checkpoints/prod/research" and flags["--name"] == "humanoid-ppo"
    )
    assert flags["--checkpoint-freq"] == "5"
    assert "--resume" in args and args[-2:] == ["--resume-from", "s3://x/ckpt"]
    assert "--checkpoint-at-end" in args


def test_names_are_deterministic_and_short_enough():
    assert raycluster_name("cartpole") == "rlx-cartpole"
    long = "a" * 63
    assert raycluster_name(long) == raycluster_name(long)
    assert len(raycluster_name(long)) <= MAX_CLUSTER_NAME
    assert raycluster_name(long) != raycluster_name("a" * 62 + "b")
    assert job_id("ml", "cartpole", "0b9d7f0e-6c1f", 3) == "rlx-ml-cartpole-0b9d7f0e-3"


@pytest.mark.parametrize("experiment", ["ppo.cartpole", "v1.2.ppo", "a" * 40 + ".b" * 20])
def test_a_name_kuberay_would_refuse_maps_to_a_dns1035_label(experiment):
    """KubeRay requires a DNS-1035 label (no dots); RLExperiment names may have dots. The mapping
    is deterministic and never collides with the dashed spelling (test_kuberay_real: KubeRay
    accepts it)."""
    name = raycluster_name(experiment)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= MAX_CLUSTER_NAME, name
    assert name == raycluster_name(experiment)
    assert name != raycluster_name(experiment.replace(".", "-"))


def test_cpu_quantities_round_up_to_whole_ray_cpus():
    assert [cpu_count(q) for q in ("500m", "1", "2.5", "4000m")] == [1, 1, 3, 4]


def test_half_a_cpu_per_runner_is_a_500m_pod_with_one_ray_cpu():
    body, experiment = load("cpu_only")
    spec = RLExperiment.model_validate(
        {"spec": {**experiment.spec.model_dump(exclude_none=True), "rollouts": {"cpusPerRunner": 0.5}}}
    ).spec
    group = build_raycluster(body, spec, SETTINGS)["spec"]["workerGroupSpecs"][1]
    assert group["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    assert group["rayStartParams"]["num-cpus"] == "1"
    assert [cpu_quantity(c) for c in (1, 2.0, 0.25, 0.0001)] == ["1", "2", "250m", "1m"]


def test_scale_patch_changes_only_the_group():
    body, experiment = load("gpu_learners")
    built = build_raycluster(body, experiment.spec, SETTINGS)
    patched = scale_patch(built, "rollouts", 3)["spec"]["workerGroupSpecs"]
    assert worker_replicas({"spec": {"workerGroupSpecs": patched}}) == {"learners": 2, "rollouts": 3}


# --- sweeps --------------------------------------------------------------------------------------


def sweep_spec(**changes):
    """``sweep_grid``'s spec (2 learning rates, 1 learner and 2 rollouts per trial) with ``changes``."""
    _, experiment = load("sweep_grid")
    return RLExperiment.model_validate(
        {"spec": {**experiment.spec.model_dump(exclude_none=True), **changes}}
    ).spec


def test_a_two_trial_sweep_gets_pods_and_head_cpus_for_both_trials():
    body, experiment = load("sweep_grid")
    spec = experiment.spec
    assert (sweep.is_sweep(spec), sweep.trial_count(spec), sweep.concurrency(spec)) == (True, 2, 2)
    built = build_raycluster(body, spec, SETTINGS)
    assert worker_replicas(built) == {"learners": 2, "rollouts": 4}  # per trial: 1 learner, 2 runners
    for group in built["spec"]["workerGroupSpecs"]:  # each pod as big as the spec says, one bundle each
        assert group["minReplicas"] == group["maxReplicas"] == group["replicas"]
        assert group["rayStartParams"]["num-cpus"] == "1"
    head = built["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "2"  # one driver bundle (1 CPU) per running trial
    requests = head["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "2", "memory": "4Gi"}  # head.cpu "1" is raised to what Ray advertises


def test_sweep_sizing_follows_samples_concurrency_and_driver_cpus():
    grid3 = {"lr": {"grid_search": [1e-3, 1e-4, 1e-5]}, "gamma": {"grid_search": [0.9, 0.99]}}
    spec = sweep_spec(config=grid3, tune={"numSamples": 2})
    assert (sweep.trial_count(spec), sweep.concurrency(spec)) == (12, 12)
    spec = sweep_spec(config=grid3, tune={"numSamples": 2, "maxConcurrentTrials": 3})
    assert cluster_shape(spec) == ClusterShape(learners=3, rollouts=6, head_cpus=3)
    spec = sweep_spec(tune={"maxConcurrentTrials": 8})  # never more than the 2 trials
    assert cluster_shape(spec) == ClusterShape(learners=2, rollouts=4, head_cpus=2)
    spec = sweep_spec(config={"lr": 1e-3, "num_cpus_for_main_process": 2}, tune={"numSamples": 3})
    assert cluster_shape(spec) == ClusterShape(learners=3, rollouts=6, head_cpus=6)
    spec = sweep_spec(head={"cpu": "8"}, learners={"replicas": 0})  # the head's own CPUs are a floor
    assert cluster_shape(spec) == ClusterShape(learners=0, rollouts=4, head_cpus=8)
    nested = {"model": {"fcnet_hiddens": {"grid_search": [[32], [64, 64]]}}}
    spec = sweep_spec(config=nested, envConfig={"max_episode_steps": {"grid_search": [100, 200, 500]}})
    assert sweep.trial_count(spec) == 6 and sweep.search_space_keys(spec) == ["env_config", "model"]


@pytest.mark.parametrize("case", [case for case in CASES if not case.startswith("sweep")])
def test_single_runs_are_sized_as_the_spec_says(case):
    body, experiment = load(case)
    spec = experiment.spec
    assert not sweep.is_sweep(spec)
    built = build_raycluster(body, spec, SETTINGS)
    assert worker_replicas(built) == {"learners": spec.learners.replicas, "rollouts": spec.rollouts.replicas}
    head = built["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == str(cpu_count(spec.head.cpu))
    assert head["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == spec.head.cpu


def test_entrypoint_of_a_sweep_passes_spec_tune_as_the_cli_flags():
    spec = sweep_spec(
        tune={
            "numSamples": 2,
            "maxConcurrentTrials": 1,
            "scheduler": "asha",
            "schedulerConfig": {"max_t": 20, "grace_period": 2},
            "metric": "episode_len_mean",
            "mode": "min",
        }
    )
    args = shlex.split(job.entrypoint(spec, "ml", "cartpole-sweep", SETTINGS, resume_from="s3://x/ckpt"))
    flags = dict(zip(args[2::2], args[3::2], strict=False))
    assert '"lr":{"grid_search":[0.001,0.0001]}' in flags["--config"]
    tail = args[args.index("--resume") :]
    assert tail == [
        "--resume",  # restores the Tune experiment from S3: every trial from its own checkpoint
        "--checkpoint-at-end",
        "--num-samples",
        "2",
        "--scheduler",
        "asha",
        "--scheduler-config",
        '{"grace_period":2,"max_t":20}',
        "--max-concurrent-trials",
        "1",
        "--metric",
        "episode_len_mean",
        "--mode",
        "min",
    ]
    assert "--resume-from" not in args  # the CLI refuses it for a sweep
    parsed = build_parser().parse_args(args[1:])  # the real CLI reads them
    assert (parsed.num_samples, parsed.max_concurrent_trials, parsed.scheduler) == (2, 1, "asha")
    assert (parsed.metric, parsed.mode, parsed.resume) == ("episode_len_mean", "min", True)


def test_entrypoint_of_a_grid_without_spec_tune_uses_the_cli_defaults():
    spec = sweep_spec(tune=None)
    args = shlex.split(job.entrypoint(spec, "ml", "cartpole-sweep", SETTINGS, resume_from="s3://x/ckpt"))
    assert args[-2:] == ["--resume", "--checkpoint-at-end"]
