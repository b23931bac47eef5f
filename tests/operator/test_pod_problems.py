"""Why a RayCluster's Pods are not running, read from Pod status as the kubelet and the scheduler
write it (the shapes here are theirs; tests/node sees the same on a real node)."""

from __future__ import annotations

from typing import Any

from rltrainer_operator.pod_problems import pod_problems, ray_oom_problem


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
