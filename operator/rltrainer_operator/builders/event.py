"""A core ``v1`` Event about the operator's own Pod (what it lacks to work, and when it has it again).

``kubectl describe pod`` shows a Pod's events by the involved object's name, namespace and uid
(the Deployment gives the operator its Pod's through the downward API); the events of the
experiments are kopf's (``kopf.event``).
"""

from __future__ import annotations

import datetime
from typing import Any

#: The API server refuses an Event whose message is longer.
MAX_MESSAGE = 1024
COMPONENT = "rltrainer-operator"


def build_pod_event(pod: dict[str, str], type_: str, reason: str, message: str) -> dict[str, Any]:
    """``pod``: its ``name``, ``namespace`` and ``uid`` ("" when unknown). ``type_``: ``Normal``
    or ``Warning``. A message over ``MAX_MESSAGE`` is cut to it, its end "..."."""
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    involved = {"apiVersion": "v1", "kind": "Pod", "name": pod["name"], "namespace": pod["namespace"]}
    if pod.get("uid"):
        involved["uid"] = pod["uid"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod['name']}.", "namespace": pod["namespace"]},
        "involvedObject": involved,
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": pod["name"],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
