"""What Kueue says about an experiment's RayCluster: held in a queue, admitted, or preempted.

An experiment labelled ``kueue.x-k8s.io/queue-name: <LocalQueue>`` (as Kueue users label any
job) gets a RayCluster with the same label, and ``kueue.x-k8s.io/priority-class`` too when the
experiment has it. Kueue's webhook creates that cluster suspended (``spec.suspend: true``, so
KubeRay makes no Pods), Kueue makes a ``Workload`` for it (head, learners and rollouts as its
pod sets: the whole cluster is admitted at once or not at all) and unsuspends it once the
ClusterQueue's quota has room. To preempt it, Kueue suspends it again and KubeRay deletes its
Pods (each Ray pod's preStop hook gets the driver's checkpoint written first).

The operator reads, never writes, Kueue's objects: ``held(cluster)`` says whether Kueue holds the
cluster, and ``queue_state(workload)`` turns the Workload's conditions into the experiment's
reason and message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: The labels an experiment passes on to its RayCluster for Kueue.
KUEUE_LABELS = (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL)
#: Kueue labels a job's Workload with the job's uid.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_GROUP, WORKLOAD_VERSION, WORKLOAD_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"


@dataclasses.dataclass(frozen=True)
class QueueState:
    """The experiment's reason and message while Kueue holds its cluster."""

    reason: str
    message: str
    warning: bool = False
    preempted: bool = False


def kueue_labels(labels: dict[str, str] | None) -> dict[str, str]:
    """The experiment's Kueue labels, for its RayCluster."""
    return {key: value for key, value in (labels or {}).items() if key in KUEUE_LABELS and value}


def held(raycluster: dict[str, Any]) -> bool:
    """Whether Kueue holds the cluster: queued (labelled) and suspended. The operator never
    suspends a RayCluster itself (``spec.suspend`` deletes it), so a suspended one is Kueue's."""
    queued = QUEUE_NAME_LABEL in (raycluster["metadata"].get("labels") or {})
    return queued and bool((raycluster.get("spec") or {}).get("suspend"))


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def queue_state(workload: dict[str, Any] | None, queue: str) -> QueueState:
    """Why Kueue holds the cluster, from its Workload's conditions (None: none made yet)."""
    if workload is None:
        return QueueState("Queued", f"waiting for Kueue to queue the RayCluster in LocalQueue {queue}")
    evicted = _condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        reason = evicted.get("reason") or "Evicted"
        return QueueState(
            "Preempted" if reason == "Preempted" else "Evicted",
            f"Kueue evicted the RayCluster ({reason}): {evicted.get('message', '')}; it runs again, "
            "from the checkpoint written on the signal, once Kueue admits it again",
            preempted=True,
        )
    reserved = _condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False":
        message = reserved.get("message", "")
        if reserved.get("reason") == "Inadmissible":
            return QueueState("Inadmissible", f"Kueue cannot admit it: {message}", warning=True)
        return QueueState("Queued", f"waiting in LocalQueue {queue}: {message}")
    admitted = _condition(workload, "Admitted")
    if admitted is not None and admitted.get("status") == "True":
        return QueueState("Admitted", "admitted by Kueue; the RayCluster is starting")
    if reserved is None:  # Kueue made the Workload and has not considered it yet
        return QueueState("Queued", f"waiting for Kueue to consider the RayCluster in LocalQueue {queue}")
    return QueueState("Queued", f"waiting in LocalQueue {queue}: quota reserved, admission checks pending")
