"""The PodDisruptionBudget an experiment may ask for (``spec.preemption.podDisruptionBudget``).

``maxUnavailable: 0`` over the RayCluster's Pods (KubeRay labels them ``ray.io/cluster``): the
eviction API refuses to evict any of them while the experiment runs, so ``kubectl drain`` and the
cluster autoscaler wait (drain retries) until it finishes. Kueue's preemption suspends the
RayCluster (KubeRay deletes its Pods) and a spot node simply ends: neither is an eviction, and
neither is held back. Owned by the experiment, so deleting it deletes the budget.
"""

from __future__ import annotations

from typing import Any

from rltrainer_operator.builders.naming import labels
from rltrainer_operator.builders.raycluster import owner_reference


def disruption_budget_name(cluster: str) -> str:
    return f"{cluster}-pdb"


def build_disruption_budget(experiment: dict[str, Any], cluster: str) -> dict[str, Any]:
    meta = experiment["metadata"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": disruption_budget_name(cluster),
            "namespace": meta["namespace"],
            "labels": labels(meta["name"]),
            "ownerReferences": [owner_reference(experiment)],
        },
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"ray.io/cluster": cluster}}},
    }
