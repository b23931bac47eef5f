"""The Kubernetes API calls the operator makes, and so the RBAC it needs: the operator's own table
(``rltrainer_operator.permissions.API_CALLS``, which it also checks against the API server with
SelfSubjectAccessReviews while it runs), so the chart and the operator cannot disagree.

The chart's rules (``charts/rltrainer-operator/templates/_helpers.tpl``, ``rltrainer-operator.rules``)
must grant exactly these, in every watched namespace or cluster-wide: ``test_chart.py`` checks
the rendered RBAC against this table both ways (nothing missing, nothing extra).

From the operator's design (``rltrainer_operator.kube`` and kopf ``--standalone``):

- kopf lists and watches RLExperiments, patches their annotations and finalizer (its handler
  state lives there: no peering objects, no ConfigMaps) and the status subresource; the
  operator deletes an experiment only for ``ttlSecondsAfterFinished``;
- one RayCluster per experiment: read, create, patch (scale the rollout group), delete, and
  list/watch (a cluster turning ready or losing its head triggers a reconcile at once);
- events on the experiments (core ``v1`` events: kopf's ``kopf.event`` and the operator's own);
- the Pods of its RayClusters, listed by KubeRay's ``ray.io/cluster`` label while a cluster is
  not ready, so that the reason (an image pull, no node that fits, OOMKilled, a crash loop)
  reaches the experiment's conditions;
- one Secret per experiment with ``rayAuth.mode: token``, ``<cluster>-ray-token``: created
  (a 409 means it is there already), never read, updated or deleted (it is owned by the
  experiment: the garbage collector deletes it); the token in it is derived, so the operator
  never needs it back;
- Kueue's Workloads, listed by the ``kueue.x-k8s.io/job-uid`` label of a queued experiment's
  RayCluster while Kueue holds it: why it waits (quota, a missing LocalQueue) or was preempted;
- one PodDisruptionBudget per experiment with ``preemption.podDisruptionBudget``: created (a
  409 means it is there already), owned by the experiment (the garbage collector deletes it).

Nothing else: the operator never reads Secrets (pods get S3 credentials and the Ray token
through ``secretKeyRef``), and it only lists Pods (never reads their logs or changes them).
``tests/operator/test_rbac.py`` records what the operator really requests through a whole life
cycle and checks it against this table and the rendered chart. Its SelfSubjectAccessReviews need
no rule of the chart's: the default ClusterRole ``system:basic-user`` lets everyone ask.
"""

from __future__ import annotations

from pathlib import Path

from rltrainer_operator.permissions import API_CALLS, OWN_NAMESPACE_CALLS

ROOT = Path(__file__).resolve().parents[2]

#: (API group, resource) -> the verbs the operator uses on it, in every watched namespace.
OPERATOR_API_CALLS: dict[tuple[str, str], frozenset[str]] = API_CALLS
#: Events on the operator's own Pod, in the release namespace: granted there by a Role of their
#: own when no watched namespace's Role (nor the ClusterRole) already does.
OWN_NAMESPACE_API_CALLS: dict[tuple[str, str], frozenset[str]] = OWN_NAMESPACE_CALLS
#: Asked by every identity, allowed by Kubernetes' default RBAC: not the chart's to grant.
SELF_REVIEW = ("authorization.k8s.io", "selfsubjectaccessreviews", "create")

#: The replicas' leader election (``rltrainer_operator.leader_election``), on one Lease in the
#: release namespace only: read it, create it (the first replica), renew or take it over (an
#: update with its resourceVersion). Granted by its own Role there, never cluster-wide.
LEADER_ELECTION_CALLS: dict[tuple[str, str], frozenset[str]] = {
    ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update"}),
}
