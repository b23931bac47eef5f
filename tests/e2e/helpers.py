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


def wait_along(
    what: str,
    progress: Callable[[], tuple[Any, str]],
    stuck_s: float,
    total_s: float,
    interval_s: float = 1.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Wait for the end of a path of states, as long as the path moves.

    ``progress()`` returns ``(done, where)``: the value to return once there (truthy), else a
    falsy one and where things stand (a phase, a Pod's container states); it raises
    AssertionError for a state that cannot lead there. The wait fails when ``where`` stays the same
    for ``stuck_s``, naming it, and after ``total_s`` in all (both times
    ``RLTRAINER_TEST_TIMEOUT_SCALE``): a slow machine that keeps moving is waited for, a step that
    never comes is named."""
    stuck_s, total_s = stuck_s * timeout_scale(), total_s * timeout_scale()
    started = since = time.monotonic()
    where = None
    while True:
        done, now = progress()
        if done:
            return done
        if now != where:
            where, since = now, time.monotonic()
        stalled = time.monotonic() - since > stuck_s
        if stalled or time.monotonic() - started > total_s:
            detail = f"\n{explain()}" if explain is not None else ""
            why = f"no change for {stuck_s:.0f}s" if stalled else f"{total_s:.0f}s in all"
            raise AssertionError(f"{what}: {why}, stuck at: {where}{detail}")
        time.sleep(interval_s)


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
