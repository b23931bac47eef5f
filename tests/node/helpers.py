"""Waiting on real Pods: phases, conditions and container states read through kubectl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from rltrainer_operator.testing.envtest import ControlPlane


def get(plane: ControlPlane, *args: str) -> Any:
    """``kubectl get ARGS -o json``, parsed; None when the object does not exist."""
    done = plane.kubectl_run("get", *args, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl_run(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, explain: Callable[[], str] = str) -> Any:
    """Poll ``check`` until it returns something true; fail with ``explain()`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{explain()}")


def container_states(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container's (init containers' too) status by name."""
    status = pod.get("status", {})
    return {
        s["name"]: s for s in status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    }


def describe(plane: ControlPlane, kind: str, name: str, namespace: str) -> str:
    return plane.kubectl_run("describe", kind, name, "-n", namespace, check=False).stdout[-4000:]
