"""Least privilege, measured: every API request the operator makes through a whole life cycle
is allowed by the chart's rendered RBAC, and the chart grants nothing the operator never used.

The operator's own requests are told apart by user agent (kopf's, and ``rltrainer-operator/``
from ``kube.make_api_client``); the test's and the fake KubeRay's requests are not counted.
"""

from __future__ import annotations

from conftest import apply, experiment_manifest, patch_spec
from test_handlers import CLUSTER, NS, events, start, wait_for, wait_phase

from rltrainer_operator.kube import USER_AGENT
from tests.charts.expected_rbac import OPERATOR_API_CALLS
from tests.charts.helpers import CLUSTER as CLUSTER_SCOPE
from tests.charts.helpers import allows, granted_permissions, render_objects, request_permission
from tests.charts.test_chart import SERVICE_ACCOUNT


def operator_requests(kube) -> list[tuple[str, str]]:
    calls = []
    for request in kube.api.requests:
        agent = (request.headers or {}).get("User-Agent", "")
        if agent.startswith(("kopf/", USER_AGENT.split("/")[0] + "/")):
            calls.append((str(request.method.value).upper(), str(request.url.path_qs)))
    return calls


def run_life_cycle(kube, kuberay, ray_api) -> set:
    """One experiment through every transition that touches the API; the permissions it used."""
    runner = start(kube, namespaces=[NS])
    try:
        apply(kube, experiment_manifest(ttlSecondsAfterFinished=0))
        wait_for("the RayCluster", lambda: kuberay.get(NS, CLUSTER))
        kuberay.ready(NS, CLUSTER)
        wait_phase(kube, "Running")
        patch_spec(kube, {"rollouts": {"replicas": 3}})  # live scaling: patch the RayCluster
        wait_for("a new job", lambda: len(ray_api.submissions) == 2)
        patch_spec(kube, {"suspend": True})  # delete the RayCluster
        wait_phase(kube, "Suspended")
        patch_spec(kube, {"suspend": False})
        wait_for("a new RayCluster", lambda: kuberay.get(NS, CLUSTER))
        kuberay.ready(NS, CLUSTER)
        job = wait_phase(kube, "Running")["status"]["jobId"]
        ray_api.set(job, "SUCCEEDED")  # ttlSecondsAfterFinished=0: the experiment is deleted
        wait_for("the experiment to be deleted", lambda: not experiments(kube), timeout_s=60)
        wait_for("events", lambda: events(kube))
    finally:
        runner.stop()
    return {request_permission(method, url) for method, url in operator_requests(kube)} - {None}


def experiments(kube) -> list:
    return kube.client.list_namespaced_custom_object("rltrainer.io", "v1alpha1", NS, "rlexperiments")["items"]


def test_rbac_is_exactly_what_the_operator_uses(kube, kuberay, ray_api):
    used = run_life_cycle(kube, kuberay, ray_api)
    namespaced = granted_permissions(
        render_objects({"watch": {"clusterWide": False, "namespaces": [NS]}}), SERVICE_ACCOUNT
    )
    assert {p for p in used if not allows(namespaced, p)} == set()
    cluster_wide = granted_permissions(render_objects(), SERVICE_ACCOUNT)
    assert {p for p in used if not allows(cluster_wide, p)} == set()
    assert all(p.scope != CLUSTER_SCOPE for p in used)  # a namespaced operator stays in its namespace

    used_verbs = {(p.api_group, p.resource, p.verb) for p in used}
    table = {
        (group, resource, verb) for (group, resource), verbs in OPERATOR_API_CALLS.items() for verb in verbs
    }
    assert used_verbs == table, (
        f"granted but unused: {sorted(table - used_verbs)}; used: {sorted(used_verbs)}"
    )
