"""The one table of Kubernetes API calls the operator makes, and so the RBAC it needs.

The chart's rules (``charts/rltrainer-operator/templates/_helpers.tpl``, ``rltrainer-operator.rules``)
must grant exactly these, in every watched namespace or cluster-wide: ``test_chart.py`` checks
the rendered RBAC against this table both ways (nothing missing, nothing extra).

From the operator's design (``rltrainer_operator.kube`` and kopf ``--standalone``):

- kopf lists and watches RLExperiments, patches their annotations and finalizer (its handler
  state lives there: no peering objects, no ConfigMaps) and the status subresource; the
  operator deletes an experiment only for ``ttlSecondsAfterFinished``;
- one RayCluster per experiment: read, create, patch (scale the rollout group), delete;
- events on the experiments (core ``v1`` events: kopf's ``kopf.event`` and the operator's own).

Nothing else: the operator never reads Secrets (pods get S3 credentials through
``secretKeyRef``) or Pods. To reconcile with what the operator really does, feed recorded
requests to ``helpers.request_permission`` and compare (``RECORDED_CALLS`` below).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (API group, resource) -> the verbs the operator uses on it.
OPERATOR_API_CALLS: dict[tuple[str, str], frozenset[str]] = {
    ("rltrainer.io", "rlexperiments"): frozenset({"get", "list", "watch", "patch", "delete"}),
    ("rltrainer.io", "rlexperiments/status"): frozenset({"get", "patch"}),
    ("ray.io", "rayclusters"): frozenset({"get", "create", "patch", "delete"}),
    ("", "events"): frozenset({"create"}),
}

#: Where the operator tests may write the API requests the operator made (a JSON list of
#: ``{"method": "PATCH", "url": "/apis/rltrainer.io/v1alpha1/namespaces/ns/rlexperiments/x"}``,
#: e.g. from the stand-in's recorded requests, leaving out the test's own setup calls and the
#: KubeRay stand-in's ``rayclusters/status`` writes); ``test_chart.py`` checks each one against
#: this table and the rendered RBAC when the file exists. Discovery requests need no grant.
RECORDED_CALLS = ROOT / "tests" / "operator" / "data" / "api_calls.json"
