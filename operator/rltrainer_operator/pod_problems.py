"""Why a RayCluster's Pods are not running, in words a user can act on.

KubeRay reports a cluster as not ready and no more; the reasons are on its Pods (labelled
``ray.io/cluster=<name>``, with ``ray.io/group`` naming the worker group, ``headgroup`` for the
head): an image the node does not have and may not pull, a Pod no node can take, a container
the kubelet cannot create for want of a Secret or key its environment names (the S3 Secret), a container
killed for memory, one that keeps crashing, a worker that waits in KubeRay's ``wait-gcs-ready``
init container for a head it cannot reach, a deleted Pod whose node never confirms (a lost
node). ``pod_problems`` reads them from the Pods' status
(init containers' too), the first of them reaches the experiment as its condition's reason and
message, and an event. Pure functions on Pod dicts (as the API returns them), tested without a
cluster, on Pods real KubeRay made among others.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

#: Container waiting reasons the kubelet gives when it cannot get an image.
IMAGE_PULL_REASONS = frozenset({"ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
#: The kubelet's waiting reason for a container whose environment names a missing Secret, ConfigMap or key.
CONFIG_ERROR = "CreateContainerConfigError"
#: KubeRay's label naming a pod's group; its head group's value.
GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"
#: KubeRay's init container in worker Pods: it loops until the head's GCS answers at FQ_RAY_IP.
WAIT_FOR_HEAD = "wait-gcs-ready"
#: A worker waiting for the head longer than this is said to (starting Ray on a loaded 2-core
#: node takes up to ~40 s; KubeRay itself starts logging the failures after 120 s).
WAIT_FOR_HEAD_S = 90.0
#: A deleted Pod still there this long after its deletion time (the end of its grace period)
#: has a kubelet that does not answer: a live one confirms within seconds.
NODE_CONFIRM_S = 30.0


@dataclass(frozen=True)
class PodProblem:
    """``reason``: ImagePullFailed, Unschedulable, CreateContainerConfigError, OOMKilled,
    CrashLoopBackOff, WaitingForHead or NodeLost."""

    reason: str
    group: str
    message: str
    restarts: int = 0
    """The failing container's restart count (the kubelet's ``restartCount``)."""


def pod_problems(pods: list[dict[str, Any]], now: datetime.datetime | None = None) -> list[PodProblem]:
    """Every problem found, one per pod at most, in a stable order (head first, then by name).
    ``now``: the time to judge waits by (a worker waiting for the head; None: waits are not judged)."""
    ordered = sorted(pods, key=lambda p: (_group(p) != HEAD_GROUP, p["metadata"].get("name", "")))
    found = [
        problem
        for pod in ordered
        if (problem := _not_confirmed(pod, now) or _problem(pod) or _waiting_for_head(pod, now))
    ]
    return found


def _group(pod: dict[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get(GROUP_LABEL, "?")


def _where(pod: dict[str, Any]) -> str:
    group = _group(pod)
    what = "the head" if group == HEAD_GROUP else f"group {group}"
    return f"{what} (pod {pod['metadata'].get('name', '?')})"


def _problem(pod: dict[str, Any]) -> PodProblem | None:
    status = pod.get("status") or {}
    group, where = _group(pod), _where(pod)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            detail = condition.get("message", "")
            return PodProblem("Unschedulable", group, f"{where}: no node can run it: {detail}")
    images = {c["name"]: c.get("image", "?") for c in _containers(pod)}
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        name, state = container.get("name", "?"), container.get("state") or {}
        waiting = state.get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        terminated = state.get("terminated") or {}
        image = images.get(name, container.get("image", "?"))
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            detail = waiting.get("message", "")
            message = f"{where}: image {image} cannot be had ({waiting['reason']})"
            return PodProblem("ImagePullFailed", group, f"{message}: {detail}" if detail else message)
        if waiting.get("reason") == CONFIG_ERROR:
            # The kubelet's words name the Secret (or key) and its namespace: `secret "s3" not found`.
            detail = waiting.get("message", "") or "its configuration cannot be resolved"
            hint = (
                "; create it, or fix spec.storage.credentialsSecretRef" if "secret" in detail.lower() else ""
            )
            return PodProblem(
                CONFIG_ERROR, group, f"{where}: container {name} cannot be created: {detail}{hint}"
            )
        restarts = int(container.get("restartCount") or 0)
        for ended in (terminated, last):
            if ended.get("reason") == "OOMKilled":
                limit = _memory_limit(pod, name)
                return PodProblem(
                    "OOMKilled",
                    group,
                    f"{where}: container {name} was killed for using more memory than its limit ({limit})"
                    f"{_shared_memory_note(pod, name)}; raise the group's memory",
                    restarts,
                )
        if waiting.get("reason") == "CrashLoopBackOff":
            code = last.get("exitCode", "?")
            said = _last_line(last.get("message", ""))
            return PodProblem(
                "CrashLoopBackOff",
                group,
                f"{where}: container {name} keeps failing (exit code {code})" + (f": {said}" if said else ""),
                restarts,
            )
    return None


def _shared_memory_note(pod: dict[str, Any], container: str) -> str:
    """KubeRay mounts a memory-backed ``/dev/shm`` in every Ray container, sized to its memory
    limit; Ray's object store lives there, and what it holds counts against the limit."""
    spec = next((c for c in _containers(pod) if c.get("name") == container), {})
    mounted = {m.get("name") for m in spec.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
    in_memory = {
        v.get("name")
        for v in (pod.get("spec") or {}).get("volumes") or []
        if (v.get("emptyDir") or {}).get("medium") == "Memory"
    }
    if not mounted & in_memory:
        return ""
    return " (Ray's object store lives in the pod's memory-backed /dev/shm, which counts against it)"


def _not_confirmed(pod: dict[str, Any], now: datetime.datetime | None) -> PodProblem | None:
    """A deleted Pod still there ``NODE_CONFIRM_S`` past its grace period: its kubelet would have
    confirmed the deletion by then, so its node is not answering. Kubernetes keeps such a Pod
    (Terminating) until the node is back, deleted, or tainted out-of-service, and KubeRay counts
    it: no replacement, and no new cluster of the same name, before then."""
    deleted = (pod.get("metadata") or {}).get("deletionTimestamp")
    if now is None or not deleted:
        return None
    overdue = (now - datetime.datetime.fromisoformat(deleted.replace("Z", "+00:00"))).total_seconds()
    if overdue < NODE_CONFIRM_S:
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    return PodProblem(
        "NodeLost",
        _group(pod),
        f"{_where(pod)}: still there after its deletion ({deleted}, its grace period's end): node "
        f"{node} does not answer. Kubernetes removes it once the node is back, or, if the node is gone for "
        f"good, once it is deleted (kubectl delete node {node}) or tainted "
        f"node.kubernetes.io/out-of-service=nodeshutdown:NoExecute; KubeRay replaces it then",
    )


def _waiting_for_head(pod: dict[str, Any], now: datetime.datetime | None) -> PodProblem | None:
    """A worker still in KubeRay's ``wait-gcs-ready`` init container after ``WAIT_FOR_HEAD_S``:
    it cannot reach the head's GCS at the address KubeRay gave it (the head not up, or its
    Service's name not resolving in the Pod)."""
    if now is None:
        return None
    for container in (pod.get("status") or {}).get("initContainerStatuses") or []:
        started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
        if container.get("name") != WAIT_FOR_HEAD or not started:
            continue
        waited = (now - datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()
        if waited < WAIT_FOR_HEAD_S:
            return None
        spec = next((c for c in _containers(pod) if c.get("name") == WAIT_FOR_HEAD), {})
        address = next((e.get("value") for e in spec.get("env") or [] if e.get("name") == "FQ_RAY_IP"), "?")
        return PodProblem(
            "WaitingForHead",
            _group(pod),
            f"{_where(pod)}: has waited over {WAIT_FOR_HEAD_S:.0f} s for the head's GCS at {address} "
            f"(KubeRay's {WAIT_FOR_HEAD} init container): the head is not up, or that name does not "
            "resolve in the pod (the cluster's DNS)",
        )
    return None


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def _memory_limit(pod: dict[str, Any], container: str) -> str:
    for spec in _containers(pod):
        if spec.get("name") == container:
            return ((spec.get("resources") or {}).get("limits") or {}).get("memory", "none set")
    return "none set"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


#: Ray's memory monitor's words when it kills a worker (``ray.exceptions.OutOfMemoryError``),
#: Ray 2.60's "Memory on the node (IP: 10.244.0.64, ID: ...) was 0.32GB used / 0.33GB limit"
#: and older Rays' "... where the task (...) was running was 0.33GB / 0.34GB".
_RAY_OOM = re.compile(
    r"Memory on the node \(IP: ([0-9A-Fa-f.:]+)[^)]*\).*? was ([0-9.]+GB(?: used)? / [0-9.]+GB(?: limit)?)",
    re.S,
)


def ray_oom_problem(job_message: str, pods: list[dict[str, Any]]) -> PodProblem | None:
    """A driver job that failed because Ray killed a process for memory, as the pod where it
    happened: its group and memory limit (the pod's container lives on, so the kubelet reports
    nothing; the job's message names the node's IP, which is the pod's)."""
    found = _RAY_OOM.search(job_message or "")
    if found is None:
        return None
    ip, usage = found.groups()
    for pod in pods:
        if (pod.get("status") or {}).get("podIP") == ip:
            container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "?")
            limit = _memory_limit(pod, container)
            return PodProblem(
                "OOMKilled",
                _group(pod),
                f"{_where(pod)}: Ray killed a process for memory (node memory {usage}, the pod's "
                f"limit {limit}); raise the group's memory",
            )
    return PodProblem("OOMKilled", "?", f"Ray killed a process for memory on node {ip} (node memory {usage})")
