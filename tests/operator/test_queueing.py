"""Kueue's Workload conditions as the experiment's reason and message (``queueing``)."""

from __future__ import annotations

from rltrainer_operator.queueing import held, kueue_labels, queue_state


def workload(*conditions: tuple[str, str, str, str]) -> dict:
    return {
        "status": {
            "conditions": [
                dict(zip(("type", "status", "reason", "message"), c, strict=True)) for c in conditions
            ]
        }
    }


def test_only_kueues_labels_pass_to_the_raycluster():
    labels = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high", "team": "a"}
    assert kueue_labels(labels) == {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": "high"}
    assert kueue_labels(None) == {}


def test_a_cluster_is_held_only_when_queued_and_suspended():
    queued = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": {"suspend": True}}
    assert held(queued)
    assert not held({**queued, "spec": {"suspend": False}})
    assert not held({"metadata": {}, "spec": {"suspend": True}})


def test_kueues_reasons_become_the_experiments():
    pending = workload(("QuotaReserved", "False", "Pending", "insufficient unused quota for nvidia.com/gpu"))
    assert queue_state(pending, "q").reason == "Queued"
    assert "insufficient unused quota for nvidia.com/gpu" in queue_state(pending, "q").message
    missing = workload(("QuotaReserved", "False", "Inadmissible", "LocalQueue q doesn't exist"))
    state = queue_state(missing, "q")
    assert state.reason == "Inadmissible" and state.warning and "doesn't exist" in state.message
    preempted = workload(
        ("QuotaReserved", "False", "Pending", "..."),
        (
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a workload (UID: 1) due to prioritization",
        ),
    )
    state = queue_state(preempted, "q")
    assert state.reason == "Preempted" and state.preempted and "prioritization" in state.message
    assert queue_state(None, "q").reason == "Queued"
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""))
    assert queue_state(admitted, "q").reason == "Admitted"


def test_a_workload_kueue_has_not_considered_is_not_said_to_hold_quota():
    unconsidered = queue_state(workload(), "q")
    assert unconsidered.reason == "Queued" and "quota reserved" not in unconsidered.message
    reserved = queue_state(workload(("QuotaReserved", "True", "QuotaReserved", "")), "q")
    assert reserved.reason == "Queued" and "quota reserved, admission checks pending" in reserved.message
