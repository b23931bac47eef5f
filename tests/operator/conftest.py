"""Fixtures for operator tests: the Kubernetes API stand-in, a fake Ray job API, a fake KubeRay.

- ``kube``: a ``KubeAPIServer`` (kmock + the semantics in ``testing/kapi.py``) with the
  RLExperiment CRD (ours) and the RayCluster CRD (KubeRay v1.7.0's, in ``data/kuberay``)
  declared, validating every write against their schemas, and a ``KUBECONFIG`` pointing at it.
- ``ray_api``: Ray's job REST API on 127.0.0.1 with jobs whose state a test sets.
- ``kuberay``: writes RayCluster status the way KubeRay does (ready, head lost).
"""

from __future__ import annotations

import datetime
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from rltrainer_operator.testing.kapi import RAYCLUSTERS, RLX, KubeAPIServer
from rltrainer_operator.testing.schema import validator_for

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
RLX_CRD = ROOT / "crds" / "rltrainer.io_rlexperiments.yaml"
RAYCLUSTER_CRD = DATA / "kuberay" / "ray.io_rayclusters.yaml"


def declare_resources(api: Any) -> None:
    api.declare(RLX, "RLExperiment", shortnames=("rlx",), validator=validator_for(str(RLX_CRD), "v1alpha1"))
    api.declare(RAYCLUSTERS, "RayCluster", validator=validator_for(str(RAYCLUSTER_CRD), "v1"))


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """The API server; ``kube.client`` is a CustomObjectsApi on it, ``kube.url`` its address."""
    with KubeAPIServer(declare_resources) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kmock", "cluster": {"server": server.url}}],
                    "users": [{"name": "kmock", "user": {"token": "test"}}],
                    "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
                    "current-context": "kmock",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        api_client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=server.url))
        server.client = kubernetes.client.CustomObjectsApi(api_client)
        try:
            yield server
        finally:
            api_client.close()


# --- a fake Ray job API ------------------------------------------------------------------------


class FakeRayJobs:
    """Ray's ``/api/jobs/`` endpoints over jobs held in memory; ``up = False`` refuses requests."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.submissions: list[dict[str, Any]] = []
        self.stopped: list[str] = []
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

            def do_GET(self) -> None:  # noqa: N802
                job_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                with fake.lock:
                    job = fake.jobs.get(job_id)
                self._answer(200, job) if job else self._answer(404, {"detail": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    if self.path.rstrip("/") == "/api/jobs":
                        sid = body["submission_id"]
                        if sid in fake.jobs:
                            return self._answer(
                                400, {"detail": f"Job with submission_id {sid} already exists"}
                            )
                        fake.submissions.append(body)
                        fake.jobs[sid] = {
                            "status": "RUNNING",
                            "message": "",
                            "entrypoint": body["entrypoint"],
                        }
                        return self._answer(200, {"job_id": sid, "submission_id": sid})
                    job_id = self.path.rstrip("/").split("/")[-2]
                    if job_id not in fake.jobs:
                        return self._answer(404, {"detail": "not found"})
                    fake.stopped.append(job_id)
                    if fake.jobs[job_id]["status"] in ("PENDING", "RUNNING"):
                        fake.jobs[job_id]["status"] = "STOPPED"
                    return self._answer(200, {"stopped": True})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set(self, job_id: str, status: str, message: str = "") -> None:
        with self.lock:
            self.jobs[job_id].update(status=status, message=message)

    def forget_all(self) -> None:
        """What a recreated head knows: no jobs."""
        with self.lock:
            self.jobs.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def ray_api():
    fake = FakeRayJobs()
    yield fake
    fake.close()


# --- a fake KubeRay ---------------------------------------------------------------------------


class FakeKubeRay:
    """Writes RayCluster status like KubeRay v1.7 (conditions, head service, endpoints)."""

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


MERGE = "application/merge-patch+json"


@pytest.fixture
def kuberay(kube, ray_api):
    return FakeKubeRay(kube.client, ray_api.port)


# --- experiments ------------------------------------------------------------------------------


def experiment_manifest(name: str = "cartpole", namespace: str = "ml", **spec: Any) -> dict[str, Any]:
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
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**base, **spec},
    }


def apply(kube: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """``kubectl apply`` of a new experiment: what the API server stored."""
    meta = manifest["metadata"]
    return kube.client.create_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", meta["namespace"], "rlexperiments", manifest
    )


def get_experiment(kube: Any, name: str = "cartpole", namespace: str = "ml") -> dict[str, Any]:
    return kube.client.get_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace, "rlexperiments", name
    )


def patch_spec(
    kube: Any, spec: dict[str, Any], name: str = "cartpole", namespace: str = "ml"
) -> dict[str, Any]:
    return kube.client.patch_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace, "rlexperiments", name, {"spec": spec}, _content_type=MERGE
    )
