"""Least privilege, checked by the real authorizer: the chart's ServiceAccount, (Cluster)Role and
binding, rendered by Helm and applied to the real API server; the operator run with that service
account's own token through a whole experiment life cycle.

- No request of the operator is denied (the API server's audit log: no 403 for its user).
- What it used is exactly the one table of API calls (``tests/charts/expected_rbac.py``) that the
  chart's rules are checked against, so the chart grants nothing unused.
- The other way, with ``kubectl auth can-i --as``: that identity cannot read Secrets or Pods,
  nor touch experiments or RayClusters outside what it watches (namespaced mode).

Both modes: cluster-wide (ClusterRole + ClusterRoleBinding) and namespaced (a Role per watched
namespace).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml
from conftest import MERGE, apply, experiment_manifest, patch_spec, wait_for
from test_handlers import CLUSTER, events, start, wait_phase

from tests.charts.expected_rbac import OPERATOR_API_CALLS, SELF_REVIEW
from tests.charts.helpers import of_kind, render_objects

_RELEASES = itertools.count(1)


def install_rbac(kube: Any, values: dict[str, Any]) -> tuple[str, str]:
    """The chart's ServiceAccount and RBAC objects in a new release namespace; the SA's user."""
    release = f"rlx-op-{kube.ns}-{next(_RELEASES)}"
    operator_ns = f"{release}-system"
    kube.core.create_namespace({"metadata": {"name": operator_ns}})
    objects = render_objects(values, name=release, namespace=operator_ns)
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    rbac = [obj for kind in kinds for obj in of_kind(objects, kind)]
    kube.plane.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    [account] = of_kind(objects, "ServiceAccount")
    return operator_ns, account["metadata"]["name"]


def run_life_cycle(
    kube: Any, kuberay: Any, ray_api: Any, kubeconfig: str, namespaces: list[str] | None
) -> None:
    """One experiment through every transition that touches the API, as the given identity."""
    runner = start(kube, kubeconfig=kubeconfig, namespaces=namespaces)
    try:
        manifest = experiment_manifest(ttlSecondsAfterFinished=0, preemption={"podDisruptionBudget": True})
        manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
        apply(kube, manifest)
        wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
        suspend_cluster(kube, True)  # as Kueue's webhook does: queued (the Workload is looked up)
        wait_phase(kube, "Queued")
        suspend_cluster(kube, False)  # admitted
        kuberay.ready(kube.ns, CLUSTER)
        wait_phase(kube, "Running")
        patch_spec(kube, {"rollouts": {"replicas": 3}})  # live scaling: patch the RayCluster
        wait_for("a new job", lambda: len(ray_api.submissions) == 2)
        patch_spec(kube, {"suspend": True})  # delete the RayCluster
        wait_phase(kube, "Suspended")
        patch_spec(kube, {"suspend": False})
        wait_for("a new RayCluster", lambda: kuberay.live(kube.ns, CLUSTER))
        kuberay.ready(kube.ns, CLUSTER)
        job = wait_phase(kube, "Running")["status"]["jobId"]
        ray_api.set(job, "SUCCEEDED")  # ttlSecondsAfterFinished=0: the experiment is deleted
        wait_for("the experiment to be deleted", lambda: not experiments(kube), timeout_s=60)
        wait_for("events", lambda: events(kube))
    finally:
        runner.stop()


def suspend_cluster(kube: Any, suspend: bool) -> None:
    kube.client.patch_namespaced_custom_object(
        "ray.io", "v1", kube.ns, "rayclusters", CLUSTER, {"spec": {"suspend": suspend}}, _content_type=MERGE
    )


def experiments(kube: Any) -> list:
    return kube.client.list_namespaced_custom_object("rltrainer.io", "v1alpha1", kube.ns, "rlexperiments")[
        "items"
    ]


def used_calls(kube: Any, user: str) -> set[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) of every resource request ``user`` made."""
    calls = set()
    for event in kube.requests(user=user):
        ref = event.get("objectRef")
        if ref is None:  # discovery (/apis, /version): every identity may read it
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        calls.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return calls - {SELF_REVIEW}  # its permission checks (permissions.py): every identity may ask


def can_i(kube: Any, user: str, *args: str) -> bool:
    done = kube.plane.kubectl_run("auth", "can-i", f"--as={user}", *args, check=False)
    return done.stdout.strip() == "yes"


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_the_charts_rbac_is_enough_and_no_more(kube, kuberay, ray_api, mode):
    cluster_wide = mode == "cluster-wide"
    values = {} if cluster_wide else {"watch": {"clusterWide": False, "namespaces": [kube.ns]}}
    operator_ns, account = install_rbac(kube, values)
    user = f"system:serviceaccount:{operator_ns}:{account}"
    kubeconfig = str(kube.plane.service_account_kubeconfig(operator_ns, account))

    run_life_cycle(kube, kuberay, ray_api, kubeconfig, namespaces=None if cluster_wide else [kube.ns])

    denied = [
        f"{e['verb']} {e['requestURI']}"
        for e in kube.requests(user=user)
        if e["responseStatus"].get("code") == 403
    ]
    assert denied == []
    table = {
        (group, resource, verb) for (group, resource), verbs in OPERATOR_API_CALLS.items() for verb in verbs
    }
    used = used_calls(kube, user)
    assert used == table, (
        f"granted but unused: {sorted(table - used)}; used but not in the table: {sorted(used - table)}"
    )

    # The other way round: what this identity may not do.
    for forbidden in (
        ("get", "secrets"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("get", "pods"),
        ("create", "pods"),
        ("update", "rlexperiments.rltrainer.io"),
        ("create", "rlexperiments.rltrainer.io"),
        ("update", "rayclusters.ray.io"),
        ("delete", "namespaces"),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ):
        assert not can_i(kube, user, *forbidden, "-n", kube.ns), forbidden
    other = "kube-system"  # a namespace the namespaced operator does not watch
    assert can_i(kube, user, "create", "rayclusters.ray.io", "-n", other) is cluster_wide
    assert can_i(kube, user, "list", "rlexperiments.rltrainer.io", "-n", other) is cluster_wide
    assert can_i(kube, user, "list", "rlexperiments.rltrainer.io", "--all-namespaces") is cluster_wide
