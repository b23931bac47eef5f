"""Shared pieces of the end-to-end tests: real local Ray clusters played by ``LocalKubeRay``.

Every helper waits with a deadline and says what it waited for; every fixture stops what it
started (``conftest.py`` checks at the end that no local-KubeRay process is left).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import kubernetes

from rltrainer_operator.testing.local_kuberay import STARTED_IDS, _marked_processes
from tests.conftest import timeout_scale

MERGE = "application/merge-patch+json"

#: Ray start on a shared 2-core machine: a head takes 10-30 s, a worker 5-20 s.
CLUSTER_READY_S = 240


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout_s: float,
    interval_s: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> Any:
    """``check()``'s first truthy value; after ``timeout_s`` (times ``RLTRAINER_TEST_TIMEOUT_SCALE``)
    an AssertionError naming ``what``, its last value and, when given, ``explain()`` (a ``kubectl
    describe``, say)."""
    timeout_s *= timeout_scale()
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    detail = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r}){detail}")


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item["type"] == kind:
            return item
    return None


def get_raycluster(custom: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            return None
        raise


def wait_ready(custom: Any, namespace: str, name: str, timeout_s: float = CLUSTER_READY_S) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = get_raycluster(custom, namespace, name)
        head, provisioned = condition(obj, "HeadPodReady"), condition(obj, "RayClusterProvisioned")
        if head and provisioned and head["status"] == provisioned["status"] == "True":
            status = obj["status"]
            current = status.get("observedGeneration") == obj["metadata"].get("generation")
            if current and status.get("readyWorkerReplicas", 0) == status.get("desiredWorkerReplicas", 0):
                return obj
        return None

    return wait_for(f"RayCluster {namespace}/{name} ready", ready, timeout_s)


def wait_for_no_marked_processes(timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = [pid for pid, marker in _marked_processes() if marker.split("/")[0] in STARTED_IDS]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
