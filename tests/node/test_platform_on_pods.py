"""The platform on real Pods: the operator, KubeRay's own operator, two real nodes with cluster
DNS, and S3 on the pod network.

The journeys of ``tests/e2e/test_journey.py`` run here on a CPU node and a GPU node (``gpu_node``:
one ``nvidia.com/gpu`` advertised, tainted for it): the operator's RayClusters become Pods, made by
real KubeRay (its command, probes, ``wait-gcs-ready`` init container and headless head Service;
the workers find the head by its DNS name), from the trainer image; the real scheduler places
them by the spec's requests, node selector and tolerations, the kubelets run and restart them,
and a real S3 server (SeaweedFS, with the operator's and the pods' own identities) listens
on the pod network's gateway. ``make test`` runs the bad-input cases here (a learner placed on
the GPU node and killed for memory, the GPU request that cannot be placed, a driver failing inside
the trainer image); training on Pods to ``Succeeded`` with S3 checkpoints is
``test_cluster_faults``'s API server restart, and the journey's faults and resume are
``tests/e2e/test_journey.py``'s shortened journey on local Ray clusters. ``make e2e`` runs the
journey on Pods in full, suspend/resume, a sweep and the S3 refusals.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.testing.local_stack import GPU_NODE, GPU_NODE_LABELS, LocalStack
from tests.conftest import built_part
from tests.e2e import test_journey as journeys
from tests.e2e.helpers import wait_along
from tests.node.helpers import pod_where

#: The full journey on Pods stops here: 1.5 s iterations, CartPole solved long before.
POD_JOURNEY_ITERATIONS = 75
#: The full journey on Pods trains on after CartPole is solved (its faults need the time), and
#: PPO at a constant learning rate drifts away from a solved policy now and then (seen: a return
#: of 500 at iterations 56-65, 448 at 75, and the final checkpoint evaluated at 420). Every
#: iteration samples at least 1,400 steps, so the 75 iterations pass 100k steps on any machine,
#: by which the learning rate has annealed to almost nothing and the solved policy stays solved.
POD_JOURNEY_TRAINING = {
    "min_sample_timesteps_per_iteration": 1400,
    "lr": [*journeys.TUNED_PPO_CARTPOLE["lr"], [100_000, 1e-5]],
}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ROOT = Path(__file__).resolve().parents[2]


def on_pods(image: str):
    """Specs as they run on the two nodes: the trainer image (never pulled), pods sized to fit
    two 2-CPU nodes, learners on the GPU node by its label and taint (GPU code paths on the CPU:
    ``_fake_gpus``, as no device exists), rollouts and the head on the CPU node.

    Iterations last at least 1.5 s: CartPole trains at ~5 iterations a second here, and each of
    the journey's faults takes 10-50 s to recover from on Pods (a new Pod, Ray started in it), so
    the faults would otherwise come after training ended. For the same reason the full journey
    stops after a number of iterations too (CartPole is solved long before: the paced iterations
    train for 1.5 s each), and its checkpoint must still evaluate as solved: its learning rate
    anneals to almost nothing by then (``POD_JOURNEY_TRAINING``)."""

    def adapt(spec: dict[str, Any]) -> dict[str, Any]:
        if "episode_return_mean" in spec.get("stop", {}):
            spec = {**spec, "stop": {"training_iteration": POD_JOURNEY_ITERATIONS}}
            spec = journeys.merged(spec, {"config": POD_JOURNEY_TRAINING})
        spec = journeys.merged(
            spec,
            {
                "image": image,
                "imagePullPolicy": "Never",
                "head": {"cpu": "500m", "memory": "3Gi"},
                "rollouts": {"cpusPerRunner": 0.5, "memory": "1536Mi"},
                "config": {"min_time_s_per_iteration": 1.5},
            },
        )
        if spec.get("learners", {}).get("replicas", 1):
            spec = journeys.merged(
                spec,
                {
                    "learners": {
                        "cpusPerLearner": 0.5,
                        "memory": "1536Mi",
                        "gpusPerLearner": 1,
                        "nodeSelector": GPU_NODE_LABELS,
                        "tolerations": [GPU_TOLERATION],
                    },
                    "config": {"_fake_gpus": True},
                },
            )
        return spec

    return adapt


@contextlib.contextmanager
def platform_on_pods(monkeypatch, control_plane, nodes, kuberay_operator, trainer_image: str):
    """The operator on the session's cluster and nodes, with a real S3 server of its own."""
    built_part("seaweedfs")
    stack = LocalStack(
        s3_bucket=journeys.BUCKET, plane=control_plane, nodes=nodes, kuberay_operator=kuberay_operator
    )
    with journeys.running_platform(monkeypatch, stack, on_pods(trainer_image)) as platform:
        yield platform


def pods_by_node(platform: journeys.Platform, namespace: str, cluster: str) -> dict[str, set[str]]:
    """``{group: {node names}}`` of the cluster's Pods."""
    found: dict[str, set[str]] = {}
    for group, pods in platform.kuberay.pods(namespace, cluster).items():
        found[group] = {pod.spec.node_name for pod in pods}
    return found


@pytest.mark.e2e_only
def test_the_journey_on_real_pods(pod_platform):
    """``test_journey`` on Pods: placed by the scheduler (learner on the GPU node), a rollout Pod
    deleted, the learner's and the head's containers killed, resumed from S3, evaluated."""
    platform = pod_platform
    cluster = raycluster_name("cartpole")
    placed: dict[str, set[str]] = {}

    def watch_placement() -> None:
        # Record where each group ran once all of them have Pods on nodes.
        if not placed:
            groups = pods_by_node(platform, "rl", cluster)
            if {"headgroup", "learners", "rollouts"} <= set(groups) and all(
                None not in nodes for nodes in groups.values()
            ):
                placed.update(groups)

    original_log = platform.log

    def log(name: str, namespace: str, status: dict[str, Any]) -> None:
        watch_placement()
        original_log(name, namespace, status)

    platform.log = log
    timings = journeys.journey(platform, full_e2e=True)
    assert placed == {"headgroup": {"localhost"}, "learners": {GPU_NODE}, "rollouts": {"localhost"}}, placed
    record = {
        "benchmark": "operator_on_pods",
        "journey": "full",
        "machine": "2-core x86_64, one machine: control plane, two kubelets, 4 Ray pods",
        **{key: round(value, 1) if isinstance(value, float) else value for key, value in timings.items()},
    }
    print(json.dumps(record))


def said(status: dict[str, Any], reason: str) -> bool:
    """Whether a condition of the experiment gives ``reason``."""
    return any(c.get("reason") == reason for c in status.get("conditions") or [])


def experiment_where(platform: journeys.Platform, name: str, namespace: str) -> tuple[dict[str, Any], str]:
    """The experiment's status and where it stands: its phase, its job, and each Pod of its
    RayCluster (scheduled or not, each container's state)."""
    status = platform.status(name, namespace)
    where = [f"phase {status.get('phase')}"] + ([f"job {status['jobId']}"] if status.get("jobId") else [])
    cluster = status.get("rayClusterName")
    if not cluster:
        return status, "; ".join([*where, "no RayCluster yet"])
    pods = sorted(
        (pod for group in platform.kuberay.pods(namespace, cluster).values() for pod in group),
        key=lambda pod: pod.metadata.name,
    )
    return status, "; ".join(where + ([pod_where(pod) for pod in pods] or ["no Pod yet"]))


def wait_on_pods(platform: journeys.Platform, what: str, name: str, namespace: str, check):
    """The experiment's status once ``check(status)`` holds, waiting as long as its Pods and
    status move (``wait_along``: 300 s without a change fails, naming where it stood, as does
    900 s in all); a Failed phase that ``check`` does not accept fails at once."""

    def progress() -> tuple[Any, str]:
        status, where = experiment_where(platform, name, namespace)
        if check(status):
            return status, where
        if status.get("phase") == "Failed":
            raise AssertionError(f"{namespace}/{name} failed: {status.get('message')}")
        return None, where

    def events() -> str:
        plane = platform.stack.plane
        return plane.kubectl_run(
            "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False
        ).stdout[-3000:]

    return wait_along(f"{namespace}/{name}: {what}", progress, stuck_s=300, total_s=900, explain=events)


#: Memory for a learner pod that starts Ray but not torch's learner (see the test below).
TINY_LEARNER = "512Mi"


def test_bad_input_on_real_pods_is_named(pod_platform):
    """Three experiments at once, each saying what is wrong, none Running forever:

    - learners asking 2 GPUs (a node has at most one) stay Provisioning, Unschedulable naming
      ``nvidia.com/gpu`` and the group;
    - a learner pod too small for the learner (512Mi: Ray's own processes and an idle worker take
      ~340 MB of it, under Ray's memory threshold of 95% with room to spare; importing torch adds
      ~480 MB): Ray kills the learner for memory, the experiment restarts with OOMKilled naming the
      learners group and the limit. (At 340Mi the idle worker alone crossed the threshold on some
      machines: Ray killed it before the learner existed, then its raylet lost the node, a path
      that ended in a restart minutes later or not at all.)
    - an env id the operator cannot check (it has no env registry) fails inside the trainer image:
      Failed with the driver's last error line (the experiment's name has a dot: KubeRay runs its
      cluster under the mapped name)."""
    platform = pod_platform
    ns = "bad-input"
    platform.credentials_secret(ns)
    base = journeys.small_experiment(platform.stack, iterations=2)
    base["rollouts"] = {"replicas": 0}
    base["learners"] = {"replicas": 1}
    adapt = platform.adapt
    platform.adapt = lambda spec: journeys.merged(adapt(spec), {"learners": {"gpusPerLearner": 2}})
    platform.apply("greedy", ns, base)
    platform.adapt = lambda spec: journeys.merged(adapt(spec), {"learners": {"memory": TINY_LEARNER}})
    platform.apply("tiny", ns, base)
    platform.adapt = adapt
    typo = {**base, "env": "NoSuchEnv-v0", "faultTolerance": {"backoffLimit": 0}, "learners": {"replicas": 0}}
    # A dotted name (valid for an RLExperiment, not for KubeRay): its cluster runs under the
    # mapped name, far enough for the driver to fail in it.
    platform.apply("env.typo", ns, typo)

    failed = wait_on_pods(platform, "Failed", "env.typo", ns, lambda s: s.get("phase") == "Failed")
    assert "unknown env 'NoSuchEnv-v0'" in failed["message"], failed
    assert failed["rayClusterName"].startswith("rlx-env-typo-"), failed
    greedy = wait_on_pods(
        platform, "the learner Unschedulable", "greedy", ns, lambda s: said(s, "Unschedulable")
    )
    assert greedy["phase"] == "Provisioning"
    assert "group learners" in greedy["message"] and "nvidia.com/gpu" in greedy["message"], greedy
    tiny = wait_on_pods(platform, "the learner OOMKilled", "tiny", ns, lambda s: said(s, "OOMKilled"))
    assert tiny["phase"] == "Restarting"
    assert "group learners" in tiny["message"] and TINY_LEARNER in tiny["message"], tiny


@pytest.mark.e2e_only
def test_s3_that_refuses_the_pods_is_named_on_real_pods(pod_platform):
    """The real S3 server's refusals (wrong keys, a key that may only read, no such bucket) and
    a Secret the namespace lacks (the kubelet's CreateContainerConfigError), each named."""
    journeys.s3_refusals(pod_platform, "s3-refused", on_pods=True)


@pytest.mark.e2e_only
def test_suspend_resume_and_delete_on_real_pods(pod_platform):
    journeys.test_side_by_side_suspend_resume_and_delete(pod_platform)


@pytest.mark.e2e_only
def test_a_sweep_survives_the_head_on_real_pods(pod_platform):
    """The sweep's two rollout Pods tolerate the GPU taint: the head asks a CPU per trial's driver
    (two), all the CPU node has."""
    adapt = pod_platform.adapt
    tolerant = {"rollouts": {"tolerations": [GPU_TOLERATION]}}
    pod_platform.adapt = lambda spec: journeys.merged(adapt(spec), tolerant)
    journeys.test_a_sweep_survives_the_head_and_resumes(pod_platform)


#: What each example in examples/ does on these two 2-CPU nodes (the CPU node untainted, the GPU
#: node tainted for GPU work): the suspended one stays Suspended with no Pod; every other asks
#: for more than the nodes have, or for the GPU image this machine does not build, and says so.
EXAMPLE_OUTCOMES = {
    "ppo-suspended.yaml": ("Suspended", None),
    "ppo-cartpole-cpu.yaml": ("Provisioning", "Unschedulable"),
    "ppo-two-cartpoles.yaml": ("Provisioning", "Unschedulable"),
    "ppo-cartpole-sweep.yaml": ("Provisioning", "Unschedulable"),
    "ppo-gpu-learner.yaml": ("Provisioning", "Unschedulable"),
    "appo-gpu-learner.yaml": ("Provisioning", "Unschedulable"),
}


@pytest.mark.e2e_only
def test_every_example_applied_on_real_pods_runs_or_says_why_not(pod_platform):
    """``kubectl apply`` of each file in examples/ as a user would (S3 and the CPU image being
    this machine's): KubeRay makes its Pods, and the experiment either reaches its phase or names
    what these nodes lack, never a silent Provisioning."""
    platform = pod_platform
    ns = "rl-examples"
    platform.credentials_secret(ns)
    adapt = platform.adapt
    platform.adapt = lambda spec: journeys.merged(
        spec,
        {
            "image": adapt({})["image"],
            "imagePullPolicy": "Never",
            "storage": {**journeys.storage(platform.stack), "credentialsSecretRef": {"name": "s3-creds"}},
        },
    )
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    applied = {}
    for path in examples:
        if path.name not in EXAMPLE_OUTCOMES:
            assert path.name in ("kustomization.yaml", "ppo-cartpole-resume.yaml"), f"{path.name}: no outcome"
            continue  # the kustomization lists the others; the resume file re-applies ppo-cartpole
        (body,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        platform.apply(body["metadata"]["name"], ns, body["spec"])
        applied[body["metadata"]["name"]] = EXAMPLE_OUTCOMES[path.name]
    for name, (phase, reason) in applied.items():
        status = platform.wait(
            f"{phase}{f' ({reason})' if reason else ''}",
            name,
            ns,
            lambda s, phase=phase, reason=reason: (
                s.get("phase") == phase and (reason is None or said(s, reason))
            ),
            240,
        )
        if reason == "Unschedulable":
            assert "Insufficient" in status["message"] or "untolerated taint" in status["message"], status
        if phase == "Suspended":
            assert not platform.kuberay.processes(ns, raycluster_name(name))
    platform.stack.plane.kubectl_run(
        "delete", "rlexperiments", "--all", "-n", ns, "--wait=true", "--timeout=120s"
    )
