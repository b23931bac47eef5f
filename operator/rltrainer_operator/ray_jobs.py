"""A small client for Ray's job submission REST API (the head's dashboard port).

Plain HTTP (urllib) rather than ``ray.job_submission``: the operator image stays free of Ray,
and every call has a timeout. Job states are Ray's: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED.
With a token (a cluster with Ray's token authentication) every call carries
``Authorization: Bearer <token>``; Ray answers 401/403 without the right one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

TERMINAL_STATES = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})


class RayUnreachableError(Exception):
    """The job API did not answer (head down or not ready): usually transient."""


class RayJobError(Exception):
    """The job API answered with an error."""


class RayAuthError(RayJobError):
    """The job API rejected the operator's token (HTTP 401/403)."""


@dataclass(frozen=True)
class JobInfo:
    submission_id: str
    status: str
    message: str
    entrypoint: str

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATES


class RayJobClient:
    """Talks to ``<address>/api/jobs/``; ``address`` like ``http://10.0.0.5:8265``; ``token``:
    the cluster's Ray auth token (None: a cluster without authentication)."""

    def __init__(self, address: str, timeout_s: float = 10.0, token: str | None = None) -> None:
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self._token = token

    def __repr__(self) -> str:  # never the token
        return f"RayJobClient({self.address!r}, token={'set' if self._token else None})"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(f"{self.address}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, _json(response.read())
        except urllib.error.HTTPError as err:
            code, answer = err.code, _json(err.read())
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            raise RayUnreachableError(f"Ray job API at {self.address} unreachable: {err}") from None
        if code in (401, 403):
            raise RayAuthError(self._rejected(code, answer))
        return code, answer

    def _rejected(self, code: int, answer: Any) -> str:
        if not self._token:
            what = "wants a token and the operator sent none (a cluster with rayAuth.mode: token?)"
        else:
            what = (
                "rejected the operator's token (the cluster's <cluster>-ray-token Secret must hold "
                "the token derived from RLTRAINER_OPERATOR_RAY_TOKEN_KEY: was the key changed?)"
            )
        return f"the Ray job API at {self.address} {what}: HTTP {code}: {_detail(answer)}"

    def get(self, submission_id: str) -> JobInfo | None:
        """The job, or None when the cluster has no job with that id."""
        code, body = self._call("GET", f"/api/jobs/{submission_id}")
        if code == 404:
            return None
        if code != 200 or not isinstance(body, dict):
            raise RayJobError(f"GET job {submission_id}: HTTP {code}: {_detail(body)}")
        return JobInfo(
            submission_id=submission_id,
            status=str(body.get("status", "PENDING")),
            message=str(body.get("message") or ""),
            entrypoint=str(body.get("entrypoint") or ""),
        )

    def logs(self, submission_id: str, tail_chars: int = 50_000) -> str:
        """The end of the job's driver output ("" when the cluster no longer has it)."""
        code, body = self._call("GET", f"/api/jobs/{submission_id}/logs")
        if code != 200 or not isinstance(body, dict):
            return ""
        return str(body.get("logs") or "")[-tail_chars:]

    def submit(self, body: dict[str, Any]) -> JobInfo:
        """Submit a job; submitting an id that already exists returns that job (idempotent)."""
        existing = self.get(body["submission_id"])
        if existing is not None:
            return existing
        code, answer = self._call("POST", "/api/jobs/", body)
        if code != 200:
            existing = self.get(body["submission_id"])  # lost a race with ourselves
            if existing is not None:
                return existing
            raise RayJobError(f"submit job: HTTP {code}: {_detail(answer)}")
        return JobInfo(body["submission_id"], "PENDING", "", body["entrypoint"])

    def stop(self, submission_id: str) -> None:
        """Ask the job to stop (no error when it is gone or already finished)."""
        code, body = self._call("POST", f"/api/jobs/{submission_id}/stop")
        if code not in (200, 404):
            raise RayJobError(f"stop job {submission_id}: HTTP {code}: {_detail(body)}")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return raw.decode(errors="replace")


def _detail(body: Any) -> str:
    text = body.get("detail") or body.get("message") or body if isinstance(body, dict) else body
    return str(text)[:500]
