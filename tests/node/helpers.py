"""Real Pods through kubectl and Helm: applying and deleting objects, Helm releases, reading their
state (waiting on it: ``tests.e2e.helpers.wait_for``)."""

from __future__ import annotations

import json
from typing import Any

import helm_python

from rltrainer_operator.testing.envtest import ControlPlane


def get(plane: ControlPlane, *args: str) -> Any:
    """``kubectl get ARGS -o json``, parsed; None when the object does not exist."""
    done = plane.kubectl_run("get", *args, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def as_list(*objects: dict[str, Any]) -> str:
    """The objects as one ``v1`` List, for ``kubectl ... -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl_run("apply", "-f", "-", stdin=as_list(*objects))


def delete(plane: ControlPlane, *objects: dict[str, Any], wait: bool = False) -> None:
    """Delete the objects (those already gone are no error)."""
    plane.kubectl_run(
        "delete", "-f", "-", f"--wait={str(wait).lower()}", stdin=as_list(*objects), check=False
    )


def container_states(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container's (init containers' too) status by name."""
    status = pod.get("status", {})
    return {
        s["name"]: s for s in status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    }


#: A container waiting for one of these never starts without a change to its Pod or node.
NEVER_STARTS = (
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


def pod_where(pod: Any) -> str:
    """Where a Pod (a client ``V1Pod``) is on its way to running: unscheduled (and the scheduler's
    reason), or its node and each container's state. Raises AssertionError for a container that
    cannot start (``NEVER_STARTS``), naming it and the kubelet's message."""
    name, status = pod.metadata.name, pod.status
    if not pod.spec.node_name:
        unscheduled = [c for c in status.conditions or [] if c.type == "PodScheduled" and c.status == "False"]
        reason = f" ({unscheduled[0].reason}: {unscheduled[0].message})" if unscheduled else ""
        return f"{name} unscheduled{reason}"
    states = []
    for container in (status.init_container_statuses or []) + (status.container_statuses or []):
        state = container.state
        if state.waiting is not None:
            if state.waiting.reason in NEVER_STARTS:
                raise AssertionError(
                    f"{name}: container {container.name} cannot start: {state.waiting.reason}: "
                    f"{state.waiting.message}"
                )
            states.append(f"{container.name} waiting ({state.waiting.reason})")
        elif state.running is not None:
            states.append(f"{container.name} running{', ready' if container.ready else ''}")
        elif state.terminated is not None:
            states.append(f"{container.name} ended ({state.terminated.reason})")
    return f"{name} on {pod.spec.node_name}: {', '.join(states) or 'no container started yet'}"


def describe(plane: ControlPlane, kind: str, name: str, namespace: str) -> str:
    return plane.kubectl_run("describe", kind, name, "-n", namespace, check=False).stdout[-4000:]


def helm(plane: ControlPlane, namespace: str) -> helm_python.Config:
    """Helm's own client (the Helm v4 SDK, no binary) for the plane's cluster, as admin, on the
    releases of ``namespace``: what ``helm install``/``upgrade``/``rollback``/``uninstall`` do."""
    return helm_python.Config(kubeconfig_path=str(plane.kubeconfig), namespace=namespace)
