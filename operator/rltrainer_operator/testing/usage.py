"""What a test cluster's programs cost: API requests by client, a process's memory and CPU time.

Requests come from the API server's audit log (``ControlPlane.audit_log``: every request's verb,
resource, user and user agent, never a body), which tells the clients apart;
``apiserver_request_total`` on the API server's ``/metrics`` counts by verb and resource only,
with no client label. Read between two ``audit_offset``s:

    since = audit_offset(plane)
    ...
    by_client = Counter(r["client"] for r in requests(plane, since))

Memory and CPU time come from ``/proc/<pid>``.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

#: The prefixes of user agents by which clients are told apart (``client_of``).
AGENTS = (
    (("rltrainer-operator/", "kopf/"), "operator"),
    (("kube-scheduler/",), "scheduler"),
    (("kwok/",), "kwok"),
    (("kube-controller-manager/",), "controller-manager"),
    (("kube-apiserver/",), "apiserver"),
)
KUBERAY_USER = "system:serviceaccount:kuberay-system:kuberay-operator"


#: A point in the audit log: the file's inode and a byte offset in it. The API server rotates
#: its log at 100 MB (``audit-<time>.log`` beside it, the same inode), which a busy cluster of a
#: thousand nodes writes in minutes.
Position = tuple[int, int]


def audit_offset(plane: Any) -> Position:
    """Where the API server's audit log ends now: requests after this point come after it."""
    try:
        found = plane.audit_log.stat()
    except FileNotFoundError:
        return 0, 0
    return found.st_ino, found.st_size


def _audit_files(plane: Any) -> list[Path]:
    """The audit log's files, oldest first: the rotated ones (named by time), then the current."""
    log = Path(plane.audit_log)
    return [*sorted(log.parent.glob(f"{log.stem}-*{log.suffix}")), log]


def _read_between(plane: Any, since: Position, until: Position | None) -> bytes:
    chunks, reading = [], since == (0, 0)
    for path in _audit_files(plane):
        try:
            with path.open("rb") as log:
                inode = os.fstat(log.fileno()).st_ino
                start = since[1] if inode == since[0] else 0
                reading = reading or inode == since[0]
                if reading:
                    log.seek(start)
                    end = until[1] if until is not None and inode == until[0] else None
                    chunks.append(log.read(-1 if end is None else max(0, end - start)))
                if until is not None and inode == until[0]:
                    break
        except FileNotFoundError:
            continue
    return b"".join(chunks)


def requests(plane: Any, since: Position = (0, 0), until: Position | None = None) -> list[dict[str, Any]]:
    """Every request the API server finished between two ``audit_offset``s (across rotations),
    as ``{client, verb, resource, namespace, time}`` (``resource`` with its subresource,
    ``pods/binding``, or the path for non-resource requests; ``time``: when it was received)."""
    found = []
    data = _read_between(plane, since, until)
    for line in data.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource") or event.get("requestURI", "").split("?")[0]
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            found.append(
                {
                    "client": client_of(event),
                    "verb": event.get("verb"),
                    "resource": resource,
                    "namespace": ref.get("namespace"),
                    "time": event.get("requestReceivedTimestamp", ""),
                }
            )
    return found


def client_of(event: dict[str, Any]) -> str:
    """Which program made an audited request: ``operator`` (ours: its own client and kopf's),
    ``kuberay`` (by its ServiceAccount), ``scheduler``, ``kwok``, ``controller-manager``,
    ``apiserver``, or ``other`` (the benchmark, kubectl)."""
    agent = event.get("userAgent", "")
    user = (event.get("user") or {}).get("username", "")
    if user == KUBERAY_USER:
        return "kuberay"
    for prefixes, client in AGENTS:
        if agent.startswith(prefixes):
            return client
    if user.startswith("system:serviceaccount:kube-system:") or user == "system:kube-controller-manager":
        return "controller-manager"
    return "other"


def process_memory(pid: int | None) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (its peak) of a process, in bytes (zeros when it is gone)."""
    found = {"VmRSS": 0, "VmHWM": 0}
    with contextlib.suppress(OSError, TypeError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in found:
                found[key] = int(value.split()[0]) * 1024
    return found


def process_cpu_seconds(pid: int | None) -> float:
    """User plus system CPU seconds of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
