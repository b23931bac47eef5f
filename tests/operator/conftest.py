"""Fixtures for operator tests: a namespace on the real API server, a fake Ray job API, a fake KubeRay.

- ``kube``: a fresh namespace on the session's real control plane (``control_plane`` in
  ``tests/conftest.py``: kube-apiserver with our CRD and KubeRay's installed), with admin
  clients (``kube.client``: CustomObjectsApi, ``kube.core``: CoreV1Api), the admin
  ``kube.kubeconfig``, and ``KUBECONFIG`` pointing at it.
- ``ray_api``: Ray's job REST API on 127.0.0.1 with jobs whose state a test sets.
- ``kuberay``: writes RayCluster status the way KubeRay does (ready, head lost).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from rltrainer_operator.testing.envtest import ControlPlane
from rltrainer_operator.testing.fakes import MERGE, FakeKubeRay, FakeRayJobs
from tests.e2e import helpers

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
_NAMESPACES = itertools.count(1)


@dataclasses.dataclass
class Kube:
    """One test's namespace on the real API server, and admin clients for it."""

    plane: ControlPlane
    ns: str
    api_client: Any
    client: Any  # CustomObjectsApi
    core: Any  # CoreV1Api

    @property
    def kubeconfig(self) -> str:
        return str(self.plane.kubeconfig)

    def events(self, namespace: str | None = None) -> list[tuple[str, str]]:
        """(reason, message) of the Events in the namespace, oldest first."""
        items = self.core.list_namespaced_event(namespace or self.ns).items
        items.sort(key=lambda e: int(e.metadata.resource_version))  # etcd's revision: creation order
        return [(e.reason, e.message) for e in items]

    def requests(self, since: float = 0.0, **match: str) -> list[dict[str, Any]]:
        """Audit events of this namespace's requests (after ``since``, a ``time.time()``) whose
        fields match: ``verb``, ``resource``, ``subresource``, ``user``, ``agent`` (prefix)."""
        found = []
        for event in self.plane.audit_events():
            ref = event.get("objectRef") or {}
            if ref.get("namespace") not in (self.ns, None) or _timestamp(event) < since:
                continue
            fields = {
                "verb": event.get("verb"),
                "resource": ref.get("resource"),
                "subresource": ref.get("subresource"),
                "user": event["user"].get("username"),
            }
            if all(fields.get(k) == v for k, v in match.items() if k != "agent") and (
                event.get("userAgent", "").startswith(match.get("agent", ""))
            ):
                found.append(event)
        return found


def _timestamp(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


@pytest.fixture
def kube(control_plane, monkeypatch):
    """A new namespace (``kube.ns``) for the test; deleted after it (in the background)."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    core = kubernetes.client.CoreV1Api(api_client)
    ns = f"t{next(_NAMESPACES)}-{int(time.time()) % 100000}"
    core.create_namespace({"metadata": {"name": ns}})
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    try:
        yield Kube(control_plane, ns, api_client, kubernetes.client.CustomObjectsApi(api_client), core)
    finally:
        _delete_namespace(core, ns)
        api_client.close()


def _delete_namespace(core: Any, ns: str) -> None:
    """Experiments left with our finalizer (no operator left to run it) would hold the
    namespace in Terminating: drop those finalizers, then delete it."""
    custom = kubernetes.client.CustomObjectsApi(core.api_client)
    for item in custom.list_namespaced_custom_object("rltrainer.io", "v1alpha1", ns, "rlexperiments")[
        "items"
    ]:
        if item["metadata"].get("finalizers"):
            custom.patch_namespaced_custom_object(
                "rltrainer.io",
                "v1alpha1",
                ns,
                "rlexperiments",
                item["metadata"]["name"],
                {"metadata": {"finalizers": None}},
                _content_type=MERGE,
            )
    core.delete_namespace(ns)


@pytest.fixture
def ray_api():
    fake = FakeRayJobs()
    yield fake
    fake.close()


@pytest.fixture
def kuberay(kube, ray_api):
    return FakeKubeRay(kube.client, ray_api.port)


def wait_for(what: str, check: Any, timeout_s: float = 60, explain: Any = None) -> Any:
    """``check()``'s first truthy value within ``timeout_s`` (scaled for slow machines), polled
    every 0.1 s; an AssertionError naming ``what`` (and ``explain()``) if none."""
    return helpers.wait_for(what, check, timeout_s, interval_s=0.1, explain=explain)


# --- experiments ------------------------------------------------------------------------------


def experiment_manifest(name: str = "cartpole", namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    """An RLExperiment; ``apply`` puts it in the test's namespace unless ``namespace`` is given."""
    base = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "config": {"train_batch_size": 256},
        "stop": {"training_iteration": 10},
        "checkpoint": {"uri": "s3://checkpoints/rl"},
        "learners": {"replicas": 1},
        "rollouts": {"replicas": 2},
    }
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "spec": {**base, **spec},
    }


def apply(kube: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """``kubectl apply`` of a new experiment: what the API server stored."""
    namespace = manifest["metadata"].setdefault("namespace", kube.ns)
    return kube.client.create_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace, "rlexperiments", manifest
    )


def get_experiment(kube: Any, name: str = "cartpole", namespace: str | None = None) -> dict[str, Any]:
    return kube.client.get_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace or kube.ns, "rlexperiments", name
    )


def patch_spec(
    kube: Any, spec: dict[str, Any], name: str = "cartpole", namespace: str | None = None
) -> dict[str, Any]:
    return kube.client.patch_namespaced_custom_object(
        "rltrainer.io",
        "v1alpha1",
        namespace or kube.ns,
        "rlexperiments",
        name,
        {"spec": spec},
        _content_type=MERGE,
    )
