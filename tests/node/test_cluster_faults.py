"""Faults of the cluster itself under a training experiment, on real Pods: the control plane
restarted, the container runtime restarted.

Each test trains a real experiment (PPO CartPole, the head and one rollout Pod, made by real
KubeRay on the CPU node), breaks one part of the cluster around it while it trains, and checks
what must survive: the same RayCluster, the same Pods and containers (none restarted), the same
Ray job, no iteration lost (the checkpoints' iterations follow on), the status catching up, and
the experiment ending ``Succeeded``. Each prints a JSON record (time to recover, iterations lost,
final return) that docs/platform/fault-tolerance.md's cluster-faults table reports.

``make test`` runs the API server's restart (30 s down, etcd kept); ``make e2e`` also restarts
etcd with it, and containerd under the running Pods.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.testing.local_stack import GPU_NODE_LABELS
from tests.e2e import test_journey as journeys
from tests.e2e.helpers import wait_for

NS = "cluster-faults"
E2E_ONLY = pytest.mark.e2e_only
#: As long as the issue asks: more than the kubelet's 10 s lease renewals and client-go's
#: retries, less than the node controller's grace period (the Pods stay where they are).
OUTAGE_S = 30
#: Iterations last at least 1.5 s on Pods: 40 outlast the outage by half a minute or more.
ITERATIONS = 40


def training_experiment(platform: journeys.Platform, iterations: int = ITERATIONS) -> dict[str, Any]:
    """The head and one rollout Pod on the CPU node; a checkpoint every 5 iterations."""
    spec = journeys.small_experiment(platform.stack, iterations=iterations)
    spec["checkpoint"] = {"uri": f"s3://{journeys.BUCKET}/faults", "frequency": 5}
    return spec


def credentials(platform: journeys.Platform) -> None:
    """This platform's S3 keys (each platform's S3 server makes its own) in the namespace, which
    outlives a test on the session's control plane."""
    platform.namespace(NS)
    platform.stack.plane.kubectl_run("delete", "secret", "s3-creds", "-n", NS, "--ignore-not-found")
    platform.credentials_secret(NS)


def progress_iteration(name: str) -> int:
    """The driver's own count of iterations (``progress.json`` in S3, which the operator reads)."""
    uri = f"s3://{journeys.BUCKET}/faults/{NS}/{name}/progress.json"
    return json.loads(journeys.rltrainer_read(uri)).get("iteration") or 0


def pods_and_containers(platform: journeys.Platform, name: str) -> dict[str, tuple[str, str, int]]:
    """``{pod name: (pod uid, container id, restart count)}`` of the experiment's Ray Pods."""
    found = {}
    for pods in platform.kuberay.pods(NS, raycluster_name(name)).values():
        for pod in pods:
            [ray] = [c for c in pod.status.container_statuses or [] if c.name.startswith("ray-")]
            found[pod.metadata.name] = (pod.metadata.uid, ray.container_id, ray.restart_count)
    return found


def raycluster_uid(platform: journeys.Platform, name: str) -> str:
    cluster = platform.custom.get_namespaced_custom_object(
        "ray.io", "v1", NS, "rayclusters", raycluster_name(name)
    )
    return cluster["metadata"]["uid"]


def start_training(platform: journeys.Platform, name: str) -> dict[str, Any]:
    """Apply the experiment; its status once it trains past iteration 3."""
    credentials(platform)
    platform.apply(name, NS, training_experiment(platform))
    return platform.wait(
        "Running past iteration 3", name, NS,
        lambda s: s.get("phase") == "Running" and (s.get("iteration") or 0) >= 3, 420,
    )  # fmt: skip


def train_through(platform: journeys.Platform, name: str, fault: str, break_it) -> dict[str, Any]:
    """Apply the experiment, let it train, ``break_it()`` (returns once the part is back), then
    check that nothing restarted and nothing was lost; the test's record."""
    running = start_training(platform, name)
    pods, cluster = pods_and_containers(platform, name), raycluster_uid(platform, name)
    assert len(pods) == 2, pods

    break_it()
    back = time.monotonic()
    reached = progress_iteration(name)
    caught_up = platform.wait(
        f"the status at the driver's iteration {reached}", name, NS,
        lambda s: (s.get("iteration") or 0) >= min(reached, ITERATIONS), 180,
    )  # fmt: skip
    recovered_s = time.monotonic() - back
    # Nothing restarted that did not need to: the same cluster, Pods, containers and job (read
    # before the end: a finished experiment's cluster is deleted).
    assert raycluster_uid(platform, name) == cluster
    assert pods_and_containers(platform, name) == pods
    done = platform.wait_phase("Succeeded", name, NS, 300)
    assert done["jobId"] == running["jobId"] and (done.get("restarts") or 0) == 0, done
    assert not done.get("envRunnerRestarts") and not done.get("learnerRestarts"), done
    # No iteration lost or repeated: the checkpoints every 5 iterations, to the last.
    checkpoints = journeys.checkpoint_iterations(f"s3://{journeys.BUCKET}/faults/{NS}/{name}")
    assert checkpoints == list(range(5, ITERATIONS + 1, 5)), checkpoints
    record = {
        "benchmark": "cluster_fault",
        "fault": fault,
        "iteration_before": running["iteration"],
        "driver_iteration_when_back": reached,
        "status_iteration_when_caught_up": caught_up["iteration"],
        "seconds_until_status_caught_up": round(recovered_s, 1),
        "iterations_lost": 0,
        "restarts": 0,
        "final_return": done.get("episodeReturnMean"),
    }
    print(json.dumps(record))
    return record


@pytest.mark.parametrize(
    "etcd",
    [pytest.param(False, id="api-server"), pytest.param(True, id="api-server-and-etcd", marks=E2E_ONLY)],
)
def test_training_goes_on_through_a_control_plane_restart(pod_platform, etcd):
    """The API server down for 30 s (and etcd with it in ``make e2e``): the kubelets, KubeRay,
    the controllers and the operator reconnect by themselves; training never notices (the Pods
    talk to S3 and to each other, not to the API server); the status catches up with the driver
    once the API server answers."""
    plane = pod_platform.stack.plane

    def outage() -> None:
        with plane.outage(etcd=etcd):
            time.sleep(OUTAGE_S)

    name = "through-etcd" if etcd else "through-apiserver"
    train_through(pod_platform, name, "etcd and API server" if etcd else "API server", outage)


@E2E_ONLY
def test_training_goes_on_through_a_containerd_restart(pod_platform, node):
    """containerd restarted under the running Pods (a runtime upgrade): their containers run on
    under their shims, the kubelet reconnects, nothing is restarted."""
    train_through(pod_platform, "through-containerd", "containerd", node.restart_containerd)


#: How long the rollout Pod is cut off from the head: past Ray's health checks of a node (the
#: GCS marks it dead after about 30 s) and its raylet's wait for the GCS.
PARTITION_S = 60


@E2E_ONLY
def test_a_rollout_pod_cut_off_from_the_head_for_a_minute(pod_platform, node):
    """Every packet between the rollout Pod and the head dropped for 60 s, in the rollout Pod's
    network namespace, then let through again: the driver never waits on the lost env runner
    past its sample timeout, the env runner comes back (reconnected, or replaced once its Ray
    node was declared dead), training goes on in the same job and the experiment succeeds."""
    platform, name = pod_platform, "cut-off"
    cluster = raycluster_name(name)
    running = start_training(platform, name)
    pods = platform.kuberay.pods(NS, cluster)
    [head], [rollout] = pods["headgroup"], pods["rollouts"]

    with node.partition(NS, rollout.metadata.name, head.status.pod_ip):
        time.sleep(PARTITION_S)
    restored = time.monotonic()
    cut_at = progress_iteration(name)
    resumed = platform.wait(
        "training again after the network came back", name, NS,
        lambda s: (s.get("iteration") or 0) >= cut_at + 2, 300,
    )  # fmt: skip
    recovered_s = time.monotonic() - restored
    done = platform.wait_phase("Succeeded", name, NS, 600)
    assert done["jobId"] == running["jobId"] and (done.get("restarts") or 0) == 0, done
    checkpoints = journeys.checkpoint_iterations(f"s3://{journeys.BUCKET}/faults/{NS}/{name}")
    assert checkpoints == list(range(5, ITERATIONS + 1, 5)), checkpoints
    print(
        json.dumps(
            {
                "benchmark": "cluster_fault",
                "fault": f"a rollout Pod cut off from the head for {PARTITION_S} s",
                "iteration_before": running["iteration"],
                "driver_iteration_when_restored": cut_at,
                "seconds_until_training_again": round(recovered_s, 1),
                "iteration_when_training_again": resumed["iteration"],
                "env_runner_restarts": done.get("envRunnerRestarts") or 0,
                "iterations_lost": 0,
                "restarts": 0,
                "final_return": done.get("episodeReturnMean"),
            }
        )
    )


#: A label this test moves from node to node: where the Pods it places may run.
POOL = "test.rltrainer.io/pool"
#: Evicted 10 s after their node stops answering (Kubernetes' default is 300 s).
QUICK_EVICTION = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 10,
    }
    for taint in ("unreachable", "not-ready")
]
#: What an administrator (or a cloud's node controller) says of a node that is gone for good:
#: Kubernetes' non-graceful node shutdown. The Pod garbage collector then deletes the Pods the
#: dead kubelet can no longer confirm; until then they stay Terminating, and KubeRay counts them.
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


def label_node(plane, node: str, value: str | None) -> None:
    plane.kubectl_run("label", "node", node, f"{POOL}={value}" if value else f"{POOL}-", "--overwrite")


def ready(plane, node: str) -> bool:
    done = plane.kubectl_run(
        "get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False
    )
    return done.stdout.strip() == "True"


def lose_a_node(platform: journeys.Platform, lost, spare, name: str, groups: set[str]) -> dict[str, Any]:
    """Train with ``groups`` (of headgroup, rollouts) on ``lost`` and the rest on ``spare``,
    then lose ``lost`` as a machine is lost (its kubelet and containers gone): it goes NotReady,
    its Pods are evicted 10 s later and stay Terminating until it is tainted out-of-service, and
    KubeRay's replacements run on ``spare``. Returns the timeline (seconds from the loss)."""
    plane = platform.stack.plane
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    # The groups to lose on the lost node; the others on the spare (the GPU node, by its label).
    placement = {
        group: (
            {"nodeSelector": {POOL: "lost"}, "tolerations": [gpu, *QUICK_EVICTION]}
            if group in groups
            else {"nodeSelector": GPU_NODE_LABELS, "tolerations": [gpu]}
        )
        for group in ("headgroup", "rollouts")
    }
    spec = training_experiment(platform)
    spec["head"] = {**spec["head"], **placement["headgroup"]}
    spec["rollouts"] = {**spec["rollouts"], **placement["rollouts"]}
    label_node(plane, lost.name, "lost")
    try:
        credentials(platform)
        platform.apply(name, NS, spec)
        running = platform.wait(
            "Running past iteration 6 (a checkpoint at 5)", name, NS,
            lambda s: s.get("phase") == "Running" and (s.get("iteration") or 0) >= 6, 420,
        )  # fmt: skip
        cluster = raycluster_name(name)
        placed = {
            g: {p.spec.node_name for p in pods} for g, pods in platform.kuberay.pods(NS, cluster).items()
        }
        assert all(placed[g] == {lost.name} for g in groups), placed
        # The spare node may take them now (the lost node's labels go with it).
        label_node(plane, spare.name, "lost")
        timeline: dict[str, Any] = {"iteration_at_loss": progress_iteration(name)}
        lost_at = time.monotonic()
        lost.stop_kubelet(containers=True)

        def since() -> float:
            return round(time.monotonic() - lost_at, 1)

        wait_for(f"node {lost.name} NotReady", lambda: not ready(plane, lost.name), 180)
        timeline["not_ready_s"] = since()

        def on_lost_node() -> list[Any]:
            pods = platform.core.list_namespaced_pod(NS, label_selector=f"ray.io/cluster={cluster}").items
            return [p for p in pods if p.spec.node_name == lost.name]

        wait_for(
            "its Pods evicted (deleted, Terminating)",
            lambda: all(p.metadata.deletion_timestamp for p in on_lost_node()),
            120,
        )
        timeline["evicted_s"] = since()
        if "headgroup" in groups:
            # The restart waits for the old cluster, held up by its Pods on the lost node: said.
            held = platform.wait(
                "NodeLost said", name, NS,
                lambda s: any(c.get("reason") == "NodeLost" for c in s.get("conditions") or []), 240,
            )  # fmt: skip
            assert f"node {lost.name} does not answer" in held["message"], held
            timeline["node_lost_said_s"] = since()
        plane.kubectl_run("taint", "node", lost.name, OUT_OF_SERVICE)
        try:
            wait_for(
                f"KubeRay's replacements Running on {spare.name}",
                lambda: all(
                    {p.spec.node_name for p in platform.kuberay.pods(NS, cluster).get(g, [])} == {spare.name}
                    and all(p.status.phase == "Running" for p in platform.kuberay.pods(NS, cluster)[g])
                    for g in groups
                ),
                240,
            )
            timeline["replaced_s"] = since()
            done = platform.wait_phase("Succeeded", name, NS, 600)
            timeline["succeeded_s"] = since()
        finally:
            # The machine comes back: the kubelet registers again, the taint goes.
            plane.kubectl_run("taint", "node", lost.name, f"{OUT_OF_SERVICE.split('=')[0]}-", check=False)
            lost.start_kubelet()
        return {"running": running, "done": done, **timeline}
    finally:
        label_node(plane, lost.name, None)
        label_node(plane, spare.name, None)


@E2E_ONLY
def test_the_rollouts_node_lost(pod_platform, node, gpu_node):
    """The rollout Pod's node lost (the head on the other one): the env runner's Ray node is
    declared dead, the driver goes on without it, KubeRay's replacement rollout Pod starts on
    the spare node once the lost one's Pod is gone, and training goes on in the same job."""
    record = lose_a_node(pod_platform, node, gpu_node, "rollouts-node-lost", {"rollouts"})
    done = record.pop("done")
    running = record.pop("running")
    assert done["jobId"] == running["jobId"] and (done.get("restarts") or 0) == 0, done
    assert (done.get("envRunnerRestarts") or 0) >= 1, done
    figures = {"iterations_lost": 0, "final_return": done.get("episodeReturnMean")}
    print(json.dumps({"benchmark": "cluster_fault", "fault": "the rollouts' node lost", **record, **figures}))


@E2E_ONLY
def test_the_heads_node_lost(pod_platform, node, gpu_node):
    """The head's node lost (the rollout Pod with it): the driver is gone; the operator restarts
    the experiment, which resumes from the newest checkpoint in S3, on the spare node."""
    record = lose_a_node(pod_platform, node, gpu_node, "head-node-lost", {"headgroup", "rollouts"})
    done = record.pop("done")
    record.pop("running")
    assert done["restarts"] == 1, done
    checkpoints = journeys.checkpoint_iterations(f"s3://{journeys.BUCKET}/faults/{NS}/head-node-lost")
    assert checkpoints == sorted(set(checkpoints)) and checkpoints[-1] == ITERATIONS, checkpoints
    resumed_from = max(i for i in checkpoints if i <= record["iteration_at_loss"])
    figures = {
        "iterations_lost": record["iteration_at_loss"] - resumed_from,
        "final_return": done.get("episodeReturnMean"),
    }
    print(json.dumps({"benchmark": "cluster_fault", "fault": "the head's node lost", **record, **figures}))
