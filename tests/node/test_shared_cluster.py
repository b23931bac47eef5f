"""A shared GPU cluster on real Pods: real Kueue admits, queues and preempts the experiments'
RayClusters, real KubeRay makes and deletes their Pods, the kubelets run the preStop hooks.

The queues are what a platform team sets up (docs/guide/shared-clusters.md): a ResourceFlavor, a
ClusterQueue whose quota holds the one ``nvidia.com/gpu`` of the GPU node (and more CPU and
memory than the nodes have, so that the GPU is what binds), a LocalQueue in the experiments'
namespace, and two WorkloadPriorityClasses. Each experiment asks for a GPU learner, so one
runs at a time.

Only ``make e2e`` runs these. ``make test`` runs a smaller check of the same operator behaviour
with real Kueue on a simulated cluster (``tests/operator/test_sim_cluster.py``: KWOK's nodes, no
Ray in the Pods, so no preStop checkpoint and no resumed training).

The queue and one preemption: a low-priority experiment runs; a second one of its priority
waits (Queued, Kueue's reason, no timeout); a high-priority one preempts the first, whose driver
writes a checkpoint on its pods' preStop hook before Ray stops; the high-priority one runs and
ends, then the waiting one; the preempted one is admitted again and resumes from that
checkpoint; an experiment labelled for a LocalQueue that does not exist says so. Then a drain of
the head's node, and every pod of an experiment deleted at once (as a spot node's end does).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.queueing import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from rltrainer_operator.testing import kueue as kueue_objects
from tests.e2e import test_journey as journeys
from tests.e2e.helpers import wait_for
from tests.node.helpers import get
from tests.node.test_platform_on_pods import GPU_TOLERATION, platform_on_pods

NS = "shared"
QUEUE = "team-gpus"
CLUSTER_QUEUE = "gpus"


@pytest.fixture
def shared_platform(monkeypatch, control_plane, node, gpu_node, gpu_images, kuberay_operator, kueue):
    with platform_on_pods(
        monkeypatch, control_plane, [node, gpu_node], kuberay_operator, gpu_images.trainer
    ) as platform:
        platform.namespace(NS)
        # This platform's S3 keys (each platform's S3 server makes its own) for the namespace,
        # which outlives the test on the session's control plane.
        control_plane.kubectl_run("delete", "secret", "s3-creds", "-n", NS, "--ignore-not-found")
        platform.credentials_secret(NS)
        kueue.apply_queues(*kueue_objects.one_gpu_queues(NS, QUEUE, CLUSTER_QUEUE))
        yield platform
        control_plane.kubectl_run("delete", "localqueue", QUEUE, "-n", NS, "--ignore-not-found", check=False)
        control_plane.kubectl_run("delete", "clusterqueue", CLUSTER_QUEUE, "--ignore-not-found", check=False)


def gpu_experiment(platform: journeys.Platform, iterations: int) -> dict[str, Any]:
    """A GPU learner (the quota's one GPU), a rollout, the head; checkpoints every 10 iterations,
    so that what the preemption's checkpoint saves is more than the periodic one had."""
    spec = journeys.small_experiment(platform.stack, iterations=iterations)
    spec["learners"] = {"replicas": 1}
    spec["checkpoint"] = {"uri": f"s3://{journeys.BUCKET}/shared", "frequency": 10}
    spec["preemption"] = {"gracePeriodSeconds": 60}
    return spec


def labels(priority: str, queue: str = QUEUE) -> dict[str, str]:
    return {QUEUE_NAME_LABEL: queue, PRIORITY_CLASS_LABEL: priority}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def workload_of(platform: journeys.Platform, name: str) -> dict[str, Any] | None:
    cluster = get(platform.stack.plane, "raycluster", raycluster_name(name), "-n", NS)
    if cluster is None:
        return None
    found = get(
        platform.stack.plane,
        "workloads",
        "-n",
        NS,
        "-l",
        f"kueue.x-k8s.io/job-uid={cluster['metadata']['uid']}",
    )
    return (found or {}).get("items", [None])[0] if found and found.get("items") else None


def evicted_at(workload: dict[str, Any]) -> float | None:
    for c in (workload.get("status") or {}).get("conditions") or []:
        if c["type"] == "Evicted" and c["status"] == "True":
            moment = datetime.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
            return moment.replace(tzinfo=datetime.UTC).timestamp()
    return None


def progress_of(name: str) -> dict[str, Any]:
    return json.loads(journeys.rltrainer_read(f"s3://{journeys.BUCKET}/shared/{NS}/{name}/progress.json"))


def disruption_figures(name: str, before: int, record: dict[str, Any] | None = None) -> dict[str, Any]:
    record = record or progress_of(name).get("preempted") or {}
    return {
        "iteration_seen_before_the_signal": before,
        "checkpoint_iteration": record.get("iteration"),
        "seconds_from_signal_to_checkpoint": round(record.get("seconds_to_checkpoint") or 0, 1),
    }


@pytest.mark.e2e_only
def test_kueue_queues_and_preempts_without_losing_work(shared_platform):
    platform = shared_platform
    platform.apply("low-a", NS, gpu_experiment(platform, iterations=14), labels("low"))
    # A queue that does not exist: said in Kueue's words, never a hang nor a timeout.
    platform.apply("lost", NS, gpu_experiment(platform, iterations=2), labels("low", queue="no-such-queue"))
    lost = platform.wait("Queued, named", "lost", NS, lambda s: s.get("phase") == "Queued", 120)
    assert condition(lost, "Queued")["reason"] == "Inadmissible"
    assert "no-such-queue" in lost["message"] and "doesn't exist" in lost["message"], lost
    running = platform.wait(
        "the first experiment Running past iteration 3", "low-a", NS,
        lambda s: s.get("phase") == "Running" and (s.get("iteration") or 0) >= 3, 420,
    )  # fmt: skip
    assert condition(running, "Queued").get("status") == "False"

    # The same priority: it waits for the GPU, saying so in Kueue's words, and never times out.
    platform.apply("low-b", NS, gpu_experiment(platform, iterations=2), labels("low"))
    waiting = platform.wait("the second Queued", "low-b", NS, lambda s: s.get("phase") == "Queued", 120)
    assert "nvidia.com/gpu" in waiting["message"], waiting
    assert condition(waiting, "Queued")["status"] == "True"
    assert (
        get(platform.stack.plane, "pods", "-n", NS, "-l", f"ray.io/cluster={raycluster_name('low-b')}")[
            "items"
        ]
        == []
    )

    # A higher priority preempts the first: its pods' hooks get the driver's checkpoint written.
    before = platform.status("low-a", NS).get("iteration") or 0
    platform.apply("high", NS, gpu_experiment(platform, iterations=2), labels("high"))
    preempted = platform.wait(
        "the first one preempted", "low-a", NS,
        lambda s: s.get("phase") == "Queued" and s.get("disruptions") == 1, 180,
    )  # fmt: skip
    assert condition(preempted, "Queued")["reason"] == "Preempted", preempted
    record = wait_for("the preemption's checkpoint", lambda: progress_of("low-a").get("preempted"), 120)
    assert record.get("checkpoint") and not record.get("error"), record
    evicted = evicted_at(workload_of(platform, "low-a"))
    assert evicted is not None
    checkpointed = record["iteration"]
    assert checkpointed >= before, record  # the newest iteration, not the last periodic checkpoint
    # The others run in turn: the high priority first, then the one queued first.
    platform.wait("the high-priority one Succeeded", "high", NS, lambda s: s.get("phase") == "Succeeded", 420)
    platform.wait("the waiting one Succeeded", "low-b", NS, lambda s: s.get("phase") == "Succeeded", 420)
    done = platform.wait(
        "the preempted one Succeeded", "low-a", NS, lambda s: s.get("phase") == "Succeeded", 600
    )
    assert done["restarts"] == 0 and done["disruptions"] == 1 and done["iteration"] == 14, done
    assert platform.status("lost", NS)["phase"] == "Queued"  # still waiting for its queue
    print(
        json.dumps(
            {
                "benchmark": "kueue_preemption_on_pods",
                "machine": "2-core x86_64, one machine: control plane, two kubelets, Kueue, KubeRay",
                "iteration_when_preempted_at_least": before,
                "checkpoint_iteration": checkpointed,
                "seconds_from_signal_to_checkpoint": round(record["seconds_to_checkpoint"], 1),
                "seconds_from_kueue_eviction_to_checkpoint": round(
                    record["checkpoint_written_at"] - evicted, 1
                ),
                "final_iteration": done["iteration"],
                "final_return": done.get("episodeReturnMean"),
            }
        )
    )


@pytest.mark.e2e_only
def test_draining_the_heads_node_resumes_the_experiment(shared_platform):
    """``kubectl drain`` of the head's node: the kubelet evicts the head (its hook has the
    checkpoint written), the scheduler places the new cluster's Pods on the other node (every group
    tolerates the GPU node's taint here), the experiment resumes and Succeeds."""
    platform = shared_platform
    spec = gpu_experiment(platform, iterations=30)
    spec["learners"] = {"replicas": 0}  # the head learns: it and one rollout fit on one node
    spec["head"] = {"tolerations": [GPU_TOLERATION]}
    spec["rollouts"] = {"tolerations": [GPU_TOLERATION]}
    platform.apply("drained", NS, spec)
    platform.wait(
        "Running past iteration 5", "drained", NS,
        lambda s: s.get("phase") == "Running" and (s.get("iteration") or 0) >= 5, 420,
    )  # fmt: skip
    plane = platform.stack.plane
    head = get(
        plane, "pods", "-n", NS, "-l", f"ray.io/cluster={raycluster_name('drained')},ray.io/node-type=head"
    )
    # Every group tolerates the GPU node's taint here, so the scheduler may put the head on either
    # node: the one holding it is drained, the other takes the new cluster.
    node = head["items"][0]["spec"]["nodeName"]
    try:
        plane.kubectl_run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
        disrupted = platform.wait(
            "resumed after the drain", "drained", NS, lambda s: (s.get("disruptions") or 0) >= 1, 240
        )
        assert disrupted["restarts"] == 0, disrupted
        done = platform.wait("Succeeded", "drained", NS, lambda s: s.get("phase") == "Succeeded", 600)
        assert done["iteration"] == 30 and done["restarts"] == 0, done
        print(json.dumps({"benchmark": "drain_on_pods", **disruption_figures("drained", before=5)}))
    finally:
        plane.kubectl_run("uncordon", node, check=False)


@pytest.mark.e2e_only
def test_every_pod_terminated_at_once_resumes_the_experiment(shared_platform):
    """What a spot node's end does to its Pods, as near as one machine can show it: every Ray Pod
    of the experiment deleted at once (each gets its preStop hook, then SIGTERM, within the grace
    period). The real thing is the kubelet's graceful node shutdown (systemd-logind inhibitors),
    which this machine's kubelets do not run under."""
    platform = shared_platform
    platform.apply("spot", NS, gpu_experiment(platform, iterations=30))
    platform.wait(
        "Running past iteration 12", "spot", NS,
        lambda s: s.get("phase") == "Running" and (s.get("iteration") or 0) >= 12, 420,
    )  # fmt: skip
    selector = f"ray.io/cluster={raycluster_name('spot')}"
    platform.stack.plane.kubectl_run("delete", "pods", "-n", NS, "-l", selector, "--wait=false")
    disrupted = platform.wait("resumed", "spot", NS, lambda s: (s.get("disruptions") or 0) >= 1, 240)
    record = progress_of("spot").get("preempted") or {}
    assert record.get("checkpoint") and record["iteration"] >= 12, record
    assert disrupted["restarts"] == 0, disrupted
    done = platform.wait("Succeeded", "spot", NS, lambda s: s.get("phase") == "Succeeded", 600)
    assert done["iteration"] == 30 and done["restarts"] == 0, done
    print(
        json.dumps(
            {"benchmark": "pods_deleted_on_pods", **disruption_figures("spot", before=12, record=record)}
        )
    )
