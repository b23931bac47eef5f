"""Fakes for what the operator talks to besides Kubernetes, for tests and ``bench.operator``.

- ``FakeRayJobs``: Ray's job submission REST API (``/api/jobs/``) on 127.0.0.1, over jobs held
  in memory whose state the caller sets (``set``, or ``before_job_read`` as each is read),
  with every submission and stop recorded; with a ``token`` it checks ``Authorization:
  Bearer`` as Ray's token authentication does (401 without one, 403 with a wrong one). One
  fake can stand in for many heads: a request under ``/heads/<address>`` is a request to the
  head at ``address`` (recorded per job in ``addresses``), and
  ``/progress/<namespace>/<name>`` answers what ``progress`` returns for an experiment (the
  driver's ``progress.json``; see ``testing.sim_cluster``).
- ``FakeKubeRay``: writes RayCluster status the way KubeRay v1.6 does (conditions, head service,
  dashboard endpoint); ``FakeKubeRay.run_in_background()`` marks every new cluster ready.

The end-to-end tests use real Ray instead (``local_kuberay``); these keep the state-machine
tests fast and deterministic.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes

MERGE = "application/merge-patch+json"


class FakeRayJobs:
    """Ray's ``/api/jobs/`` endpoints over jobs held in memory (``set`` changes a job's state).

    ``token``: the token every request must carry (None: no authentication); it can be set
    later (``fake.token = ...``), e.g. once the experiment's uid is known."""

    def __init__(self, token: str | None = None) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.submissions: list[dict[str, Any]] = []
        self.stopped: list[str] = []
        self.requests = 0  # every call, for counting the operator's load
        self.token = token
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.rejected = 0  # requests answered 401/403
        self.addresses: dict[str, str] = {}  # submission id -> the head address it was sent to
        #: ``(namespace, name) -> progress.json's content or None`` for ``/progress/...``.
        self.progress: Callable[[str, str], dict[str, Any] | None] | None = None
        #: Called with a job's id before each answer about it (the caller moves jobs on in time).
        self.before_job_read: Callable[[str], None] | None = None
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                """Ray's token check: 401 without a token, 403 with a wrong one."""
                header = self.headers.get("Authorization")
                with fake.lock:
                    fake.authorizations.append(header)
                    if fake.token is None or header == f"Bearer {fake.token}":
                        return True
                    fake.rejected += 1
                if header is None:
                    self._answer(401, {"detail": "Unauthorized: Missing authentication token"})
                else:
                    self._answer(403, {"detail": "Forbidden: Invalid authentication token"})
                return False

            def _head_and_path(self) -> tuple[str, str]:
                """The head a request under ``/heads/<address>`` is for ("" for none), and the rest."""
                if not self.path.startswith("/heads/"):
                    return "", self.path
                _, _, address, rest = self.path.split("/", 3)
                return address, "/" + rest

            def do_GET(self) -> None:  # noqa: N802
                with fake.lock:
                    fake.requests += 1
                _head, path = self._head_and_path()
                if path.startswith("/progress/") and fake.progress is not None:
                    _, _, namespace, name = path.rstrip("/").split("/", 3)
                    found = fake.progress(namespace, name)
                    return self._answer(200, found) if found is not None else self._answer(404, {})
                if not self._authorized():
                    return
                parts = path.rstrip("/").split("/")
                logs = parts[-1] == "logs"
                job_id = parts[-2] if logs else parts[-1]
                job = fake._read(job_id)
                if job is None:
                    self._answer(404, {"detail": "not found"})
                else:
                    self._answer(200, {"logs": job.get("logs", "")} if logs else job)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.requests += 1
                if not self._authorized():
                    return
                head, path = self._head_and_path()
                if path.rstrip("/") == "/api/jobs":
                    self._answer(*fake._submit(head, body))
                else:
                    self._answer(*fake._stop(path.rstrip("/").split("/")[-2]))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _read(self, job_id: str) -> dict[str, Any] | None:
        """A job as ``GET /api/jobs/<id>`` answers it, after ``before_job_read`` (None: no such job)."""
        if self.before_job_read is not None:
            self.before_job_read(job_id)
        with self.lock:
            return self.jobs.get(job_id)

    def _submit(self, head: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /api/jobs/`` to the head at ``head``: the job starts RUNNING."""
        sid = body["submission_id"]
        with self.lock:
            if sid in self.jobs:
                return 400, {"detail": f"Job with submission_id {sid} already exists"}
            self.submissions.append(body)
            self.addresses[sid] = head
            self.jobs[sid] = {
                "status": "RUNNING",
                "message": "",
                "entrypoint": body["entrypoint"],
                "metadata": body.get("metadata") or {},
                "start_time": int(time.time() * 1000),  # Ray's: milliseconds
            }
        return 200, {"job_id": sid, "submission_id": sid}

    def _stop(self, job_id: str) -> tuple[int, dict[str, Any]]:
        """``POST /api/jobs/<id>/stop``."""
        with self.lock:
            if job_id not in self.jobs:
                return 404, {"detail": "not found"}
            self.stopped.append(job_id)
            if self.jobs[job_id]["status"] in ("PENDING", "RUNNING"):
                self.jobs[job_id]["status"] = "STOPPED"
        return 200, {"stopped": True}

    def set(self, job_id: str, status: str, message: str = "", logs: str | None = None) -> None:
        """A job's new state; ``logs``: its driver output (``/logs``), when given."""
        with self.lock:
            self.jobs[job_id].update(status=status, message=message)
            if logs is not None:
                self.jobs[job_id]["logs"] = logs

    def forget_all(self) -> None:
        """What a recreated head knows: no jobs."""
        with self.lock:
            self.jobs.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class FakeKubeRay:
    """Writes RayCluster status like KubeRay v1.6 (conditions, head service, endpoints)."""

    def __init__(self, client: Any, dashboard_port: int) -> None:
        self.client = client
        self.dashboard_port = dashboard_port

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)
        except kubernetes.client.exceptions.ApiException as err:
            if err.status == 404:
                return None
            raise

    def live(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The RayCluster unless it is absent or being deleted."""
        cluster = self.get(namespace, name)
        return None if cluster is None or cluster["metadata"].get("deletionTimestamp") else cluster

    def deleted(self, namespace: str, name: str, wait_s: float = 0.0) -> bool:
        """Gone, or being deleted: a foreground deletion keeps the object (with a
        ``deletionTimestamp``) until the garbage collector has removed its dependents.
        ``wait_s``: wait that long for it to be gone altogether."""
        deadline = time.monotonic() + wait_s
        while True:
            cluster = self.get(namespace, name)
            if cluster is None or (not wait_s and cluster["metadata"].get("deletionTimestamp")):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def list(self, namespace: str) -> list[dict[str, Any]]:
        return self.client.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")["items"]

    def set_status(self, namespace: str, name: str, head_ready: bool, provisioned: bool) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def condition(kind: str, ok: bool, reason: str) -> dict[str, Any]:
            return {
                "type": kind,
                "status": "True" if ok else "False",
                "reason": reason,
                "message": "",
                "lastTransitionTime": now,
            }

        status = {
            "state": "ready" if head_ready else "",
            "conditions": [
                condition(
                    "HeadPodReady", head_ready, "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound"
                ),
                condition("RayClusterProvisioned", provisioned, "AllPodRunningAndReadyFirstTime"),
            ],
            "head": {
                "podIP": "127.0.0.1",
                "serviceIP": "127.0.0.1",
                "podName": f"{name}-head-abcde",
                "serviceName": f"{name}-head-svc",
            },
            "endpoints": {"dashboard": str(self.dashboard_port), "gcs-server": "6379", "client": "10001"},
        }
        self.client.patch_namespaced_custom_object_status(
            "ray.io", "v1", namespace, "rayclusters", name, {"status": status}, _content_type=MERGE
        )

    def ready(self, namespace: str, name: str) -> None:
        self.set_status(namespace, name, head_ready=True, provisioned=True)

    def lose_head(self, namespace: str, name: str) -> None:
        self.set_status(namespace, name, head_ready=False, provisioned=True)

    def run_in_background(self, namespaces: list[str], interval_s: float = 0.2) -> threading.Event:
        """Mark every RayCluster in ``namespaces`` ready as soon as it appears; set the event to stop."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval_s):
                for namespace in namespaces:
                    for cluster in self.list(namespace):
                        conditions = (cluster.get("status") or {}).get("conditions") or []
                        if not any(c.get("type") == "HeadPodReady" for c in conditions):
                            self.ready(namespace, cluster["metadata"]["name"])

        threading.Thread(target=loop, name="fake-kuberay", daemon=True).start()
        return stop
