"""The names both sides share (GCS keys, the driver's last line, the exit status) and the GCS
client they talk through."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

#: The GCS key-value namespace of the keys below (each is followed by a driver's id).
NAMESPACE = "rltrainer"
#: A driver is watching: its Ray job id, pid, host, iteration, timings, heartbeat.
DRIVER_PREFIX = "preemption/driver/"
#: A hook's request to that driver (the first hook's: pod, reason, requested_at).
REQUEST_PREFIX = "preemption/request/"
#: The driver's answer: outcome (checkpointed, failed, ended), checkpoint, timings.
RESULT_PREFIX = "preemption/result/"

#: How the last line of a preempted ``rltrainer train`` starts (the Ray job's last output line).
PREEMPTED_LINE_PREFIX = "preempted ("
#: ``rltrainer train``'s exit status when preempted: EX_TEMPFAIL, "try again later".
EXIT_PREEMPTED = 75
#: Ray's GCS port when ``RAY_PORT`` is not set.
DEFAULT_RAY_PORT = 6379

_NS = NAMESPACE.encode()
_RPC_TIMEOUT_S = 5.0  # one GCS call; a stalled GCS must not stall training


def pod_name() -> str:
    """Who asks: the Ray node's cloud instance id (KubeRay sets it to the pod name), else the host."""
    return os.environ.get("RAY_CLOUD_INSTANCE_ID") or os.environ.get("HOSTNAME") or socket.gethostname()


def default_gcs_address() -> str:
    """``$FQ_RAY_IP:$RAY_PORT`` on a KubeRay worker pod, ``127.0.0.1:$RAY_PORT`` on the head."""
    return f"{os.environ.get('FQ_RAY_IP') or '127.0.0.1'}:{os.environ.get('RAY_PORT') or DEFAULT_RAY_PORT}"


def preempted_line(reason: str, checkpoint: str | None, iterations: int, error: str | None = None) -> str:
    """``rltrainer train``'s last line when preempted (it starts with ``PREEMPTED_LINE_PREFIX``)."""
    if error is not None:
        newest = f"the newest checkpoint is {checkpoint}" if checkpoint else "there is no checkpoint"
        said = f"the checkpoint after {iterations} iteration(s) failed ({error}); {newest}"
    elif checkpoint is not None:
        said = f"checkpoint {checkpoint} written after {iterations} iteration(s)"
    else:
        said = "no checkpoint (no iteration trained yet)"
    return f"{PREEMPTED_LINE_PREFIX}{reason}): {said}; resume with --resume"


class GcsUnavailableError(Exception):
    """No Ray GCS answered at the address, or it refused us (a wrong or missing token)."""


class GcsKeys:
    """Our JSON values in Ray's GCS key-value store, through a Ray GCS client.

    The client reads Ray's token settings from the environment as Ray's own clients do
    (``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``): the hook runs with the Ray container's environment.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def connect(cls, address: str, timeout_s: float) -> GcsKeys:
        """A client of the GCS at ``HOST:PORT``; ``GcsUnavailableError`` within about ``timeout_s``."""
        host, _, port = address.rpartition(":")
        try:  # Ray's client waits 10 s and more for a GCS that is not there: ask the port first
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except (OSError, ValueError) as err:
            raise GcsUnavailableError(f"no Ray GCS answers at {address} ({err})") from None
        from ray._raylet import InnerGcsClient

        try:
            return cls(InnerGcsClient.standalone(address, None, int(timeout_s * 1000)))
        except Exception as err:  # noqa: BLE001 - Ray's RpcError, AuthenticationError, ...
            raise GcsUnavailableError(f"the Ray GCS at {address} refused us: {err}") from None

    def get(self, key: str) -> dict[str, Any] | None:
        raw = self.client.internal_kv_get(key.encode(), _NS, timeout=_RPC_TIMEOUT_S)
        return json.loads(raw) if raw else None

    def put(self, key: str, value: dict[str, Any], overwrite: bool = True) -> None:
        self.client.internal_kv_put(key.encode(), json.dumps(value).encode(), overwrite, _NS, _RPC_TIMEOUT_S)

    def delete(self, key: str) -> None:
        self.client.internal_kv_del(key.encode(), False, _NS, timeout=_RPC_TIMEOUT_S)

    def keys(self, prefix: str) -> list[str]:
        return sorted(
            key.decode() for key in self.client.internal_kv_keys(prefix.encode(), _NS, _RPC_TIMEOUT_S)
        )

    def job_state(self, job_id: str) -> tuple[bool, str]:
        """``(alive, submission status)`` of a Ray job (an unknown job is not alive)."""
        if not job_id:  # (an empty id would list every job)
            return False, ""
        jobs = self.client.get_all_job_info(
            job_or_submission_id=job_id, skip_is_running_tasks_field=True, timeout=_RPC_TIMEOUT_S
        )
        for info in jobs.values():
            return not info.is_dead, info.job_info.status if info.HasField("job_info") else ""
        return False, ""
