"""Why a RayCluster's Pods are not running, read from Pod status as the kubelet and the scheduler
write it (the shapes here are theirs; tests/node sees the same on a real node)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from rltrainer_operator.pod_problems import (
    NODE_CONFIRM_S,
    WAIT_FOR_HEAD,
    WAIT_FOR_HEAD_S,
    pod_problems,
    ray_oom_problem,
)


def pod(name: str, group: str, status: dict[str, Any], memory: str | None = None) -> dict[str, Any]:
    resources = {"limits": {"memory": memory}} if memory else {}
    return {
        "metadata": {"name": name, "labels": {"ray.io/cluster": "c", "ray.io/group": group}},
        "spec": {"containers": [{"name": "ray-worker", "image": "trainer:1", "resources": resources}]},
        "status": status,
    }


def waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "containerStatuses": [
            {
                "name": "ray-worker",
                "image": "trainer:1",
                "state": {"waiting": {"reason": reason, "message": message}},
                **extra,
            }
        ]
    }


def test_a_healthy_or_starting_pod_is_no_problem() -> None:
    running = {"containerStatuses": [{"name": "ray-worker", "state": {"running": {}}}]}
    creating = waiting("ContainerCreating")
    assert (
        pod_problems([pod("a", "headgroup", running), pod("b", "rollouts", creating), pod("c", "x", {})])
        == []
    )


def test_an_image_the_node_lacks_names_the_group_and_the_image() -> None:
    message = 'Container image "trainer:1" is not present with pull policy of Never'
    (problem,) = pod_problems([pod("c-rollouts-worker-x", "rollouts", waiting("ErrImageNeverPull", message))])
    assert problem.reason == "ImagePullFailed" and problem.group == "rollouts"
    assert "group rollouts" in problem.message and "image trainer:1" in problem.message
    assert "ErrImageNeverPull" in problem.message and message in problem.message


def test_an_unschedulable_pod_says_what_no_node_has() -> None:
    why = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
        ],
    }
    (problem,) = pod_problems([pod("c-learners-worker-x", "learners", status)])
    assert (
        problem.reason == "Unschedulable"
        and "nvidia.com/gpu" in problem.message
        and "group learners" in problem.message
    )


def test_oomkilled_names_the_container_and_its_limit() -> None:
    status = waiting("CrashLoopBackOff", lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}})
    (problem,) = pod_problems([pod("c-learners-worker-x", "learners", status, memory="256Mi")])
    assert (
        problem.reason == "OOMKilled"
        and "256Mi" in problem.message
        and "raise the group's memory" in problem.message
    )


def test_a_crash_loop_carries_the_containers_last_line() -> None:
    last = {
        "terminated": {
            "reason": "Error",
            "exitCode": 1,
            "message": "Traceback ...\nValueError: no env named 'Nope-v0'\n",
        }
    }
    (problem,) = pod_problems(
        [pod("c-rollouts-worker-x", "rollouts", waiting("CrashLoopBackOff", lastState=last))]
    )
    assert problem.reason == "CrashLoopBackOff" and "exit code 1" in problem.message
    assert problem.message.endswith("ValueError: no env named 'Nope-v0'")


def test_the_head_comes_first() -> None:
    problems = pod_problems(
        [
            pod("a-worker", "rollouts", waiting("ErrImageNeverPull")),
            pod("z-head", "headgroup", waiting("ImagePullBackOff")),
        ]
    )
    assert [p.group for p in problems] == ["headgroup", "rollouts"] and "the head" in problems[0].message


def test_a_job_ray_killed_for_memory_names_the_pod_its_group_and_limit() -> None:
    message = (
        "Job entrypoint command failed with exit code 1, last available logs:\n"
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.244.0.64, ID: 5c1f) where the task (actor ID: 9e, name=Learner.__init__,"
        " pid=312, memory used=0.21GB) was running was 0.33GB / 0.34GB (0.97), which exceeds the memory usage"
        " threshold of 0.95.\nRefer to the documentation on how to address the out of memory issue"
    )
    learner = pod("c-learners-worker-x", "learners", {"podIP": "10.244.0.64"}, memory="340Mi")
    head = pod("c-head-y", "headgroup", {"podIP": "10.244.0.2"})
    problem = ray_oom_problem(message, [head, learner])
    assert problem is not None and problem.reason == "OOMKilled" and problem.group == "learners"
    assert "group learners" in problem.message and "340Mi" in problem.message
    assert "0.33GB / 0.34GB" in problem.message
    assert ray_oom_problem("ValueError: boom", [head, learner]) is None
    ray_260 = (
        "ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory."
        " Memory on the node (IP: 10.244.0.64, ID: 70fa9b6e) was 0.32GB used / 0.33GB limit (0.959157)\n"
        "OOM kill reason: Memory usage 341897216B exceeded threshold of 338690048B"
    )
    problem = ray_oom_problem(ray_260, [head, learner])
    assert problem is not None and "group learners" in problem.message
    assert "0.32GB used / 0.33GB limit" in problem.message


# Pods as real KubeRay (v1.6.1) made them for an experiment's RayCluster (tests/node records them),
# with the states a kubelet gives them set on top.
RECORDED = Path(__file__).resolve().parent / "data" / "kuberay_recorded"


def recorded(kind: str, **status: Any) -> dict[str, Any]:
    found = json.loads((RECORDED / f"{kind}-pod.json").read_text())
    found["status"] = status
    return found


def test_a_worker_waiting_in_kuberays_init_container_names_the_address_it_waits_for() -> None:
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)

    def waiting_since(seconds: float) -> dict[str, Any]:
        started = (now - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        running = {"name": WAIT_FOR_HEAD, "state": {"running": {"startedAt": started}}}
        return recorded("worker", phase="Pending", initContainerStatuses=[running])

    assert pod_problems([waiting_since(30)], now=now) == []
    assert pod_problems([waiting_since(600)]) == []  # no clock, no judgement of waits
    (problem,) = pod_problems([waiting_since(WAIT_FOR_HEAD_S + 1)], now=now)
    assert problem.reason == "WaitingForHead" and problem.group == "rollouts"
    assert "rlx-pods-head-svc.kuberay-on-pods.svc.cluster.local" in problem.message
    assert problem.message == pod_problems([waiting_since(500)], now=now)[0].message  # said once


def test_an_image_missing_for_kuberays_init_container_is_named_like_the_containers() -> None:
    init = {
        "name": WAIT_FOR_HEAD,
        "state": {
            "waiting": {"reason": "ErrImageNeverPull", "message": "not present with pull policy of Never"}
        },
    }
    (problem,) = pod_problems([recorded("worker", phase="Pending", initContainerStatuses=[init])])
    assert problem.reason == "ImagePullFailed" and "group rollouts" in problem.message
    assert "image ghcr.io/rltrainer/trainer:0.1.0-cpu" in problem.message


def test_oomkilled_on_kuberays_pod_says_the_object_store_counts_against_the_limit() -> None:
    container = {
        "name": "ray-worker",
        "restartCount": 1,
        "state": {"running": {}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    }
    (problem,) = pod_problems([recorded("worker", phase="Running", containerStatuses=[container])])
    assert problem.reason == "OOMKilled" and "(1200Mi)" in problem.message
    assert "/dev/shm" in problem.message and "raise the group's memory" in problem.message
    # A pod without KubeRay's memory-backed /dev/shm (the stand-in's) says nothing of it.
    plain = pod("c-learners-worker-x", "learners", {"containerStatuses": [container]}, memory="256Mi")
    plain["spec"]["containers"][0]["name"] = "ray-worker"
    assert "/dev/shm" not in pod_problems([plain])[0].message


def test_a_missing_secret_names_it_and_the_setting_that_does() -> None:
    """The kubelet's words (``kubelet/kuberuntime``) for an env var from a Secret the namespace
    lacks, or a key the Secret lacks: the container is never created, the Pod stays Pending."""
    missing = 'secret "s3-creds" not found'
    (problem,) = pod_problems([recorded("head", phase="Pending", containerStatuses=[config_error(missing)])])
    assert problem.reason == "CreateContainerConfigError"
    assert problem.message.startswith("the head (pod ") and missing in problem.message
    assert "spec.storage.credentialsSecretRef" in problem.message
    no_key = "couldn't find key AWS_ACCESS_KEY_ID in Secret rl/s3-creds"
    (problem,) = pod_problems(
        [pod("c-rollouts-worker-x", "rollouts", {"containerStatuses": [config_error(no_key)]})]
    )
    assert "group rollouts" in problem.message and no_key in problem.message


def config_error(message: str) -> dict[str, Any]:
    reason = "CreateContainerConfigError"
    return {
        "name": "ray-worker",
        "image": "trainer:1",
        "state": {"waiting": {"reason": reason, "message": message}},
    }


def test_a_deleted_pod_its_node_never_confirms_names_the_node_and_what_frees_it() -> None:
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)

    def deleted(seconds_ago: float) -> dict[str, Any]:
        stuck = pod("c-head-x", "headgroup", {"phase": "Running"})
        stuck["metadata"]["deletionTimestamp"] = (now - datetime.timedelta(seconds=seconds_ago)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        stuck["spec"]["nodeName"] = "node-7"
        return stuck

    assert pod_problems([deleted(5)], now=now) == []  # its kubelet may still be at it
    assert pod_problems([deleted(600)]) == []  # no clock, no judgement
    (problem,) = pod_problems([deleted(NODE_CONFIRM_S + 1)], now=now)
    assert problem.reason == "NodeLost" and problem.group == "headgroup"
    assert "node node-7 does not answer" in problem.message
    assert "kubectl delete node node-7" in problem.message and "out-of-service" in problem.message
    later = now + datetime.timedelta(minutes=5)
    assert problem.message == pod_problems([deleted(NODE_CONFIRM_S + 1)], now=later)[0].message  # said once
