"""A local KubeRay: plays KubeRay's part for ``ray.io/v1`` RayClusters with real local Ray clusters.

No Kubernetes, container runtime or cloud runs on a laptop or in CI, so ``LocalKubeRay`` stands in
for the KubeRay operator against any Kubernetes API (``KubeAPIServer`` in tests). For every
RayCluster, in every namespace, it

- starts a real Ray head (``ray start --head --block``) with the dashboard and job API on a free
  127.0.0.1 port, and one ``ray start --block`` worker process per replica of each worker group,
  advertising the group's ``num-cpus``, ``num-gpus`` and ``resources`` (KubeRay's quoted JSON or
  plain JSON), with the group's container ``env`` (plain values, Secret and ConfigMap references)
  as a pod would see it (this process's ``AWS_*``, ``KUBECONFIG`` and ``RAY_ADDRESS`` are not
  passed on: a pod would not have them);
- writes the RayCluster's status with the fields real KubeRay v1.6 writes (checked against a status
  it wrote, ``tests/operator/data/kuberay_recorded``): ``HeadPodReady``, ``RayClusterProvisioned``,
  ``RayClusterSuspended`` and ``RayClusterSuspending`` conditions, ``state`` and its transition
  times, ``head`` (``serviceIP`` 127.0.0.1), ``endpoints`` (``dashboard``, ``gcs-server``,
  ``client``, ``metrics``), worker replica counts, the desired CPU, memory, GPU and TPU,
  ``observedGeneration``, ``lastUpdateTime`` (and ``reason``, this stand-in's own notes);
- recreates a worker "pod" whose process died (within a poll interval, 0.5 s); recreates a dead
  head (and its workers, whose raylets cannot outlive the GCS) unless the RayCluster has the
  annotation ``ray.io/disable-provisioned-head-restart: "true"`` and was provisioned: then, as
  KubeRay does, ``HeadPodReady`` turns False (``HeadPodNotFound``) and stays so (the workers are
  stopped, not restarted: without a head they could only crash-loop);
- follows spec changes: worker group ``replicas`` (clamped to min/max, as KubeRay does) and group
  ``suspend``; ``spec.suspend: true`` stops every process (``RayClusterSuspended``);
- kills every process of a deleted RayCluster (process groups, then a sweep by an environment
  marker that every descendant inherits) and removes its files; ``close()`` does that for all.

Every process of a "pod" is one process group started with ``start_new_session``, and carries
``RLTRAINER_LOCAL_KUBERAY=<harness id>/<namespace>/<cluster>/<pod>`` in its environment, so
``processes()`` finds them all, even those Ray re-parented. Each pod has its own Ray temp dir (as
its own machine would) and its own ports; the head's ports stay the same when it is recreated (a
Service's address does not change).

What differs from a real cluster, on purpose:

- GPUs do not exist here: ``num-gpus`` is advertised as 0 unless ``advertise_gpus=True`` (then as
  given, with no device behind it). A learner group asking for GPUs gets none locally; say
  ``gpusPerLearner: 0`` to train on a laptop. The status's ``reason`` says so.
- Token authentication is off (``RAY_AUTH_MODE=disabled``) unless ``spec.authOptions.mode`` is
  ``token``; then a token is generated and stored in a Secret named after the cluster (key
  ``auth_token``), and every process gets ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN``.
- Every server binds 127.0.0.1 where Ray lets it choose (dashboard); Ray's node IP is the
  machine's address. ``head.podIP`` and ``head.serviceIP`` are 127.0.0.1; the endpoints are the
  real local ports (a Service would map the standard ones).
- Each node's object store is capped (``object_store_memory``, 100 MB) to keep /dev/shm small.
- The GCS health-checks nodes every second (Ray: 3 s), so a dead pod's node is dropped within
  ~5 s; a deleted pod drains for ``grace_period_s`` (Ray: 30 s).
- There are no Pod objects in the API; ``processes()``/``pods()`` are the harness's view.

Use it as a context manager, or ``start()`` and ``close()`` (``local_stack.LocalStack`` bundles it
with the API stand-in and S3)::

    with KubeAPIServer(declare_resources) as server:
        client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=server.url))
        with LocalKubeRay(client) as kuberay:
            ...  # create RayClusters: their status becomes ready, with a working job API
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
RAYCLUSTERS = f"{GROUP}/{VERSION}/{PLURAL}"
#: KubeRay's annotation: once provisioned, a lost head is not recreated.
DISABLE_HEAD_RESTART = "ray.io/disable-provisioned-head-restart"
MERGE_PATCH = "application/merge-patch+json"
#: The environment marker every process of a local pod carries.
MARKER = "RLTRAINER_LOCAL_KUBERAY"
HEAD = "head"

#: The id of every harness made in this process (tests check none left a process behind).
STARTED_IDS: list[str] = []
#: Variables of this process that a pod would not see (they could hide a missing pod env var).
HOST_ONLY_ENV = ("AWS_", "KUBECONFIG", "RAY_ADDRESS", MARKER)
#: rayStartParams the harness decides itself (ports, addresses, files): ignored when given.
OWNED_PARAMS = frozenset(
    {
        "address",
        "block",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "dashboard-host",
        "dashboard-port",
        "head",
        "max-worker-port",
        "metrics-export-port",
        "min-worker-port",
        "node-ip-address",
        "node-manager-port",
        "object-manager-port",
        "port",
        "ray-client-server-port",
        "runtime-env-agent-port",
        "temp-dir",
        "worker-port-list",
    }
)
#: ``ray start`` options that take no value: ``"true"`` turns them on.
FLAG_PARAMS = frozenset({"disable-usage-stats", "no-redirect-output", "ray-debugger-external"})
#: Ports are picked from here: below Linux's ephemeral range, so outgoing connections never hold one.
PORT_RANGE = (20000, 32000)


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_resources(value: Any) -> dict[str, float]:
    """A group's ``resources`` rayStartParam as a dict.

    KubeRay passes it to ``ray start`` verbatim, so manifests quote it for the shell:
    ``'"{\\"rltrainer_rollout\\": 1}"'``; plain JSON (``'{"a": 1}'``) and a mapping work too.
    """
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1].strip()
    parsed: Any = json.loads(text)
    if isinstance(parsed, str):  # the shell-quoted form: a JSON string holding JSON
        parsed = json.loads(parsed)
    if not isinstance(parsed, dict):
        raise ValueError(f"resources must be a JSON object, got {value!r}")
    return {str(k): float(v) for k, v in parsed.items()}


#: Kubernetes quantity suffixes, largest first (binary, then decimal).
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def _quantity_value(quantity: Any) -> float:
    """A Kubernetes quantity (``"1500Mi"``, ``"500m"``, ``2``) as a number (bytes, cores)."""
    text = str(quantity).strip()
    for suffix, factor in (*_BINARY, *_DECIMAL, ("m", 1e-3)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def _quantity_text(value: float, binary: bool) -> str:
    """A sum as KubeRay's status shows it: whole units, millis (CPU), or the largest suffix that
    divides it exactly (memory: ``2700Mi``)."""
    if value == 0:
        return "0"
    if not binary:
        millis = round(value * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    for suffix, factor in _BINARY:
        if value % factor == 0:
            return f"{int(value // factor)}{suffix}"
    return str(int(value))


def desired_resources(spec: dict[str, Any]) -> dict[str, str]:
    """KubeRay's ``desiredCPU``/``desiredMemory``/``desiredGPU``/``desiredTPU``: the requests of
    the head and of every desired worker Pod, summed."""
    totals = {"cpu": 0.0, "memory": 0.0, "nvidia.com/gpu": 0.0, "google.com/tpu": 0.0}
    groups = [(spec.get("headGroupSpec") or {}, 1)]
    groups += [(g, _desired_replicas(g)) for g in spec.get("workerGroupSpecs") or []]
    for group, count in groups:
        for container in (group.get("template") or {}).get("spec", {}).get("containers") or []:
            resources = container.get("resources") or {}
            asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name in totals:
                if name in asked:
                    totals[name] += _quantity_value(asked[name]) * count
    return {
        "desiredCPU": _quantity_text(totals["cpu"], binary=False),
        "desiredMemory": _quantity_text(totals["memory"], binary=True),
        "desiredGPU": _quantity_text(totals["nvidia.com/gpu"], binary=False),
        "desiredTPU": _quantity_text(totals["google.com/tpu"], binary=False),
    }


def _quantity_to_count(quantity: Any) -> int | None:
    """A CPU/GPU quantity (``"2"``, ``"500m"``, ``1``) as a whole count, rounded up like KubeRay."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    if text.endswith("m"):
        return max(1, -(-int(text[:-1]) // 1000))
    return int(-(-float(text) // 1))


@dataclasses.dataclass
class Pod:
    """One local "pod": a ``ray start --block`` process group."""

    name: str
    group: str
    proc: subprocess.Popen
    log_path: Path
    agent_port: int
    started: float = dataclasses.field(default_factory=time.monotonic)
    ready: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclasses.dataclass
class _Cluster:
    namespace: str
    name: str
    uid: str
    root: Path
    head_ports: dict[str, int]
    head: Pod | None = None
    workers: dict[str, list[Pod]] = dataclasses.field(default_factory=dict)
    head_lost: bool = False  # provisioned head died with restarts disabled
    provisioned: bool = False
    restarts: dict[str, int] = dataclasses.field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    state: str | None = None
    state_times: dict[str, str] = dataclasses.field(default_factory=dict)
    last_status: dict[str, Any] | None = None
    suspended: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pods(self) -> list[Pod]:
        return ([self.head] if self.head else []) + [p for group in self.workers.values() for p in group]


class LocalKubeRay:
    """KubeRay's part, played with local Ray processes (see the module docstring).

    ``api_client`` is a ``kubernetes.client.ApiClient`` for the API server to watch. Options:
    ``root`` (where clusters' files go; a fresh temporary folder by default, removed on close),
    ``poll_interval_s``, ``advertise_gpus``, ``object_store_memory`` (bytes per node),
    ``start_timeout_s`` (a pod not ready by then is restarted), ``grace_period_s`` (SIGTERM
    before SIGKILL when a pod is deleted), ``extra_env`` (added to every process), ``keep_files``
    (keep pod logs and Ray's session folders after teardown, for debugging).
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        root: str | Path | None = None,
        poll_interval_s: float = 0.5,
        advertise_gpus: bool = False,
        object_store_memory: int = 100 * 1024 * 1024,
        start_timeout_s: float = 180.0,
        grace_period_s: float = 1.0,
        extra_env: dict[str, str] | None = None,
        keep_files: bool = False,
    ) -> None:
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="lkr-", dir="/tmp") if root is None else root)
        self.root.mkdir(parents=True, exist_ok=True)
        #: Tells this harness's processes from any other's (the marker's first part).
        self.id = f"{self.root.name}-{secrets.token_hex(4)}"
        STARTED_IDS.append(self.id)
        self.poll_interval_s = poll_interval_s
        self.advertise_gpus = advertise_gpus
        self.object_store_memory = object_store_memory
        self.start_timeout_s = start_timeout_s
        self.grace_period_s = grace_period_s
        self.extra_env = dict(extra_env or {})
        self.keep_files = keep_files
        self._clusters: dict[str, _Cluster] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-kuberay", daemon=True)
        self._ports: set[int] = set()
        self._ray = _ray_command()
        self.errors: list[str] = []

    # ----------------------------------------------------------------------------------- life cycle

    def start(self) -> LocalKubeRay:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching, kill every process of every cluster, remove the files."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        with self._lock:
            for cluster in list(self._clusters.values()):
                self._teardown(cluster)
            self._clusters.clear()
        if self._own_root and not self.keep_files:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalKubeRay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------------- test helpers

    def pods(self, namespace: str, name: str) -> dict[str, list[Pod]]:
        """The cluster's live pods by group (``head`` and each worker group)."""
        with self._lock:
            cluster = self._clusters.get(f"{namespace}/{name}")
            if cluster is None:
                return {}
            result = {HEAD: [cluster.head] if cluster.head else []}
            result.update({group: list(pods) for group, pods in cluster.workers.items()})
            return result

    def processes(self, namespace: str | None = None, name: str | None = None) -> list[int]:
        """PIDs of every live process (any depth) started for the cluster, or for all clusters."""
        prefix = f"{self.id}/"
        if namespace is not None:
            prefix += f"{namespace}/{name}/" if name else f"{namespace}/"
        return [pid for pid, value in _marked_processes() if value.startswith(prefix)]

    def kill_worker(self, namespace: str, name: str, group: str, index: int = 0) -> str:
        """SIGKILL every process of one worker pod (a crashed pod); returns the pod's name."""
        with self._lock:
            pod = self._clusters[f"{namespace}/{name}"].workers[group][index]
        kill_pod(f"{self.id}/{namespace}/{name}/{pod.name}")
        return pod.name

    def kill_head(self, namespace: str, name: str) -> str:
        """SIGKILL every process of the head pod (the job drivers too); returns the pod's name."""
        with self._lock:
            pod = self._clusters[f"{namespace}/{name}"].head
        if pod is None:
            raise LookupError(f"{namespace}/{name} has no head pod")
        kill_pod(f"{self.id}/{namespace}/{name}/{pod.name}")
        return pod.name

    def restarts(self, namespace: str, name: str) -> dict[str, int]:
        """Pods recreated after their process died, by group."""
        with self._lock:
            cluster = self._clusters.get(f"{namespace}/{name}")
            return dict(cluster.restarts) if cluster else {}

    # ----------------------------------------------------------------------------------- main loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._reconcile_all()
            except Exception as err:  # keep playing KubeRay: the next round tries again
                logger.exception("local KubeRay: reconcile failed")
                self.errors.append(repr(err))
            self._stop.wait(self.poll_interval_s)

    def _reconcile_all(self) -> None:
        try:
            listing = self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, _request_timeout=10)
        except kubernetes.client.ApiException as err:
            if err.status == 404:  # the RayCluster resource is not installed (yet)
                return
            raise
        seen = set()
        for obj in listing.get("items", []):
            meta = obj.get("metadata", {})
            key = f"{meta.get('namespace', 'default')}/{meta['name']}"
            if meta.get("deletionTimestamp"):
                continue
            seen.add(key)
            with self._lock:
                cluster = self._clusters.get(key)
                if cluster is not None and cluster.uid != meta.get("uid"):
                    self._teardown(cluster)  # deleted and created again under the same name
                    del self._clusters[key]
                    cluster = None
                if cluster is None:
                    cluster = self._new_cluster(obj)
                    self._clusters[key] = cluster
            if self._stop.is_set():
                return
            self._reconcile(cluster, obj)
        with self._lock:
            gone = [c for key, c in self._clusters.items() if key not in seen]
            for cluster in gone:
                logger.info("local KubeRay: %s deleted, stopping its processes", cluster.key)
                self._teardown(cluster)
                del self._clusters[cluster.key]

    def _new_cluster(self, obj: dict[str, Any]) -> _Cluster:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        root = Path(tempfile.mkdtemp(prefix="c", dir=self.root))
        if len(str(root)) > 40:
            logger.warning("local KubeRay: %s is long; Ray's socket paths may pass 107 bytes", root)
        ports = {key: self._port() for key in ("gcs-server", "dashboard", "client", "metrics")}
        logger.info("local KubeRay: %s/%s gets ports %s, files in %s", namespace, name, ports, root)
        return _Cluster(namespace=namespace, name=name, uid=meta.get("uid", ""), root=root, head_ports=ports)

    def _reconcile(self, cluster: _Cluster, obj: dict[str, Any]) -> None:
        spec = obj.get("spec", {})
        annotations = obj["metadata"].get("annotations") or {}
        if spec.get("suspend"):
            if not cluster.suspended:
                logger.info("local KubeRay: suspending %s", cluster.key)
                self._stop_all(cluster)
                cluster.suspended = True
                cluster.provisioned = False
                cluster.head_lost = False
            self._write_status(cluster, obj)
            return
        cluster.suspended = False
        self._reconcile_head(cluster, obj, annotations.get(DISABLE_HEAD_RESTART) == "true")
        self._reconcile_workers(cluster, obj)
        self._write_status(cluster, obj)

    def _reconcile_head(self, cluster: _Cluster, obj: dict[str, Any], no_restart: bool) -> None:
        head = cluster.head
        if head is not None and not head.alive:
            logger.warning(
                "local KubeRay: head pod %s of %s died. Its log ends:\n%s",
                head.name,
                cluster.key,
                _tail(head.log_path),
            )
            self._stop_pod(head)
            cluster.head = None
            # Without GCS fault tolerance every worker's raylet exits when the GCS is gone; stop
            # them now rather than after Ray's timeout (their pods restart, like KubeRay's would).
            for group, pods in cluster.workers.items():
                for pod in pods:
                    self._stop_pod(pod)
                cluster.workers[group] = []
            if cluster.provisioned and no_restart:
                cluster.head_lost = True
            else:
                cluster.restarts[HEAD] = cluster.restarts.get(HEAD, 0) + 1
        if cluster.head is None and not cluster.head_lost:
            cluster.head = self._start_pod(cluster, obj, HEAD)
        head = cluster.head
        if head is not None and not head.ready:
            head.ready = self._head_ready(cluster)
            if not head.ready and time.monotonic() - head.started > self.start_timeout_s:
                logger.error(
                    "local KubeRay: head %s not ready in %.0f s; restarting", head.name, self.start_timeout_s
                )
                self._stop_pod(head)
                cluster.head = None

    def _reconcile_workers(self, cluster: _Cluster, obj: dict[str, Any]) -> None:
        groups = {g["groupName"]: g for g in obj.get("spec", {}).get("workerGroupSpecs") or []}
        for name in list(cluster.workers):
            if name not in groups:
                for pod in cluster.workers.pop(name):
                    self._stop_pod(pod)
        head = cluster.head
        # Like KubeRay's worker init container, wait for the head: a raylet has 30 s to register
        # with the GCS, which a head still starting on a busy laptop may not give it.
        gcs_up = head is not None and head.ready
        for name, group in groups.items():
            pods = cluster.workers.setdefault(name, [])
            for pod in [p for p in pods if not p.alive]:
                logger.warning(
                    "local KubeRay: worker pod %s of %s died; recreating. Its log ends:\n%s",
                    pod.name,
                    cluster.key,
                    _tail(pod.log_path),
                )
                self._stop_pod(pod)
                pods.remove(pod)
                cluster.restarts[name] = cluster.restarts.get(name, 0) + 1
            desired = _desired_replicas(group)
            while len(pods) > desired:
                self._stop_pod(pods.pop())  # KubeRay deletes surplus pods (newest first here)
            if gcs_up:
                while len(pods) < desired:
                    pods.append(self._start_pod(cluster, obj, name))
            for pod in pods:
                if not pod.ready:
                    pod.ready = _http_ok(f"http://127.0.0.1:{pod.agent_port}/api/local_raylet_healthz")
                    if not pod.ready and time.monotonic() - pod.started > self.start_timeout_s:
                        logger.error("local KubeRay: worker %s not ready in time; restarting", pod.name)
                        _kill_group(pod.proc, signal.SIGKILL)

    def _head_ready(self, cluster: _Cluster) -> bool:
        """KubeRay's head readiness probe: the GCS through the dashboard, and the raylet."""
        head = cluster.head
        return (
            head is not None
            and _http_ok(f"http://127.0.0.1:{cluster.head_ports['dashboard']}/api/gcs_healthz")
            and _http_ok(f"http://127.0.0.1:{head.agent_port}/api/local_raylet_healthz")
        )

    # ------------------------------------------------------------------------------------ processes

    def _port(self) -> int:
        """A free port in PORT_RANGE that this harness has not handed out before."""
        for _ in range(1000):
            port = random.randrange(*PORT_RANGE)
            if port in self._ports:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError:
                    continue
            self._ports.add(port)
            return port
        raise RuntimeError(f"no free port in {PORT_RANGE}")

    def _start_pod(self, cluster: _Cluster, obj: dict[str, Any], group: str) -> Pod:
        spec = obj.get("spec", {})
        suffix = secrets.token_hex(3)[:5]
        if group == HEAD:
            group_spec = spec.get("headGroupSpec") or {}
            pod_name = f"{cluster.name}-head-{suffix}"
        else:
            group_spec = next(g for g in spec.get("workerGroupSpecs") or [] if g["groupName"] == group)
            pod_name = f"{cluster.name}-{group}-worker-{suffix}"
        # Every pod gets its own Ray temp dir, as on its own machine: raylets starting together in
        # one folder race for the same socket names. Kept short: Unix socket paths stop at 107 bytes.
        pod_dir = cluster.root / suffix
        pod_dir.mkdir(parents=True, exist_ok=True)
        agent_port = self._port()
        args = [
            *self._ray,
            "start",
            "--block",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={pod_dir}",
            f"--object-store-memory={self.object_store_memory}",
            f"--node-manager-port={self._port()}",
            f"--object-manager-port={self._port()}",
            f"--dashboard-agent-listen-port={agent_port}",
            f"--dashboard-agent-grpc-port={self._port()}",
            f"--runtime-env-agent-port={self._port()}",
            "--min-worker-port=0",
            "--max-worker-port=0",
        ]
        ports = cluster.head_ports
        if group == HEAD:
            args += [
                "--head",
                f"--port={ports['gcs-server']}",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={ports['dashboard']}",
                f"--ray-client-server-port={ports['client']}",
                f"--metrics-export-port={ports['metrics']}",
            ]
        else:
            args += [f"--address=127.0.0.1:{ports['gcs-server']}", f"--metrics-export-port={self._port()}"]
        args += self._start_params(cluster, group, group_spec)
        pod_env = self._pod_env(cluster, obj, group_spec)
        pod_env[MARKER] = f"{self.id}/{cluster.key}/{pod_name}"
        pod_env["RAY_CLOUD_INSTANCE_ID"] = pod_name
        pod_env["RAY_NODE_TYPE_NAME"] = group if group != HEAD else "headgroup"
        log_path = pod_dir / f"{pod_name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                args,
                env=pod_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=pod_dir,
            )
        logger.info("local KubeRay: started pod %s (pid %d) for %s", pod_name, proc.pid, cluster.key)
        return Pod(name=pod_name, group=group, proc=proc, log_path=log_path, agent_port=agent_port)

    def _start_params(self, cluster: _Cluster, group: str, group_spec: dict[str, Any]) -> list[str]:
        """``ray start`` flags from the group's rayStartParams (and container limits, like KubeRay)."""
        params = {str(k): v for k, v in (group_spec.get("rayStartParams") or {}).items()}
        container = _ray_container(group_spec)
        limits = {
            **(container.get("resources", {}).get("requests") or {}),
            **(container.get("resources", {}).get("limits") or {}),
        }
        if "num-cpus" not in params and limits.get("cpu") is not None:
            params["num-cpus"] = _quantity_to_count(limits["cpu"])
        if "num-gpus" not in params and limits.get("nvidia.com/gpu") is not None:
            params["num-gpus"] = _quantity_to_count(limits["nvidia.com/gpu"])
        flags = []
        for key, value in sorted(params.items()):
            if key in OWNED_PARAMS or key == "object-store-memory":
                continue
            if key == "num-gpus" and not self.advertise_gpus and float(value) > 0:
                note = f"group {group} asks for {value} GPU(s) per pod: advertised as 0 (no GPUs locally)"
                if note not in cluster.notes:
                    logger.warning("local KubeRay: %s: %s", cluster.key, note)
                    cluster.notes.append(note)
                value = 0
            if key == "resources":
                value = json.dumps(parse_resources(value))
            if key in FLAG_PARAMS:
                if str(value).lower() == "true":
                    flags.append(f"--{key}")
                continue
            flags.append(f"--{key}={value}")
        return flags

    def _pod_env(self, cluster: _Cluster, obj: dict[str, Any], group_spec: dict[str, Any]) -> dict[str, str]:
        """A pod's process environment: this process's, less HOST_ONLY_ENV, plus its container's.

        Read when the pod starts, as the kubelet does (a changed Secret reaches new pods only)."""
        # A pod sees its image's environment, not this machine's cloud credentials or clusters.
        base = {k: v for k, v in os.environ.items() if not k.startswith(HOST_ONLY_ENV)}
        # The "image" is this Python environment: its scripts (ray, rltrainer) come first on PATH.
        bin_dir = str(Path(sys.executable).parent)
        base.update(
            PATH=os.pathsep.join([bin_dir, *(p for p in base.get("PATH", "").split(os.pathsep) if p)]),
            RAY_USAGE_STATS_ENABLED="0",
            RAY_CLUSTER_NAME=cluster.name,
            # A deleted pod drains for its grace period, not Ray's default 30 s.
            RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=str(max(self.grace_period_s, 0.1)),
            # The GCS notices a dead node after 5 failed health checks, 1 s apart (Ray: 3 s).
            RAY_health_check_period_ms="1000",
            **self.extra_env,
        )
        auth = (obj.get("spec", {}).get("authOptions") or {}).get("mode")
        if auth == "token":
            base.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self._auth_token(cluster, obj))
        else:
            base["RAY_AUTH_MODE"] = "disabled"
        for var in _ray_container(group_spec).get("env") or []:
            value = self._env_value(cluster.namespace, var)
            if value is not None:
                base[var["name"]] = value
        return base

    def _env_value(self, namespace: str, var: dict[str, Any]) -> str | None:
        if "value" in var:
            return str(var["value"])
        source = var.get("valueFrom") or {}
        for kind, reader in (
            ("secretKeyRef", self._core.read_namespaced_secret),
            ("configMapKeyRef", self._core.read_namespaced_config_map),
        ):
            ref = source.get(kind)
            if not ref:
                continue
            try:
                obj = reader(ref["name"], namespace, _request_timeout=10).to_dict()
            except kubernetes.client.ApiException as err:
                if err.status == 404 and ref.get("optional"):
                    return None
                raise
            if kind == "secretKeyRef":
                if ref["key"] in (obj.get("data") or {}):
                    return base64.b64decode(obj["data"][ref["key"]]).decode()
                return (obj.get("string_data") or {}).get(ref["key"])
            return (obj.get("data") or {}).get(ref["key"])
        field = (source.get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.namespace":
            return namespace
        if field in ("status.podIP", "status.hostIP"):
            return "127.0.0.1"
        return None

    def _auth_token(self, cluster: _Cluster, obj: dict[str, Any]) -> str:
        name = (obj.get("spec", {}).get("authOptions") or {}).get("secretName") or cluster.name
        try:
            secret = self._core.read_namespaced_secret(name, cluster.namespace, _request_timeout=10)
            return base64.b64decode(secret.data["auth_token"]).decode()
        except kubernetes.client.ApiException as err:
            if err.status != 404:
                raise
        token = secrets.token_urlsafe(32)
        body = {"metadata": {"name": name}, "data": {"auth_token": base64.b64encode(token.encode()).decode()}}
        self._core.create_namespaced_secret(cluster.namespace, body, _request_timeout=10)
        return token

    def _stop_pod(self, pod: Pod) -> None:
        """Delete a pod: SIGTERM, the grace period, SIGKILL, then anything still carrying its marker."""
        if pod.alive and self.grace_period_s > 0:
            _kill_group(pod.proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.proc.wait(self.grace_period_s)
        _kill_group(pod.proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.proc.wait(10)
        _sweep(lambda marker: marker.startswith(f"{self.id}/") and marker.endswith(f"/{pod.name}"))

    def _stop_all(self, cluster: _Cluster) -> None:
        pods = cluster.pods()
        for pod in pods:  # signal every pod first: they shut down in parallel
            if pod.alive:
                _kill_group(pod.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_period_s
        for pod in pods:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.proc.wait(max(0.0, deadline - time.monotonic()))
            _kill_group(pod.proc, signal.SIGKILL)
        for pod in pods:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.proc.wait(10)
        _sweep(lambda marker: marker.startswith(f"{self.id}/{cluster.key}/"))
        cluster.head = None
        cluster.workers = {}

    def _teardown(self, cluster: _Cluster) -> None:
        self._stop_all(cluster)
        if not self.keep_files:
            shutil.rmtree(cluster.root, ignore_errors=True)

    # -------------------------------------------------------------------------------------- status

    def _write_status(self, cluster: _Cluster, obj: dict[str, Any]) -> None:
        status = self._status(cluster, obj)
        if status == cluster.last_status:
            return
        body = {"status": {**status, "lastUpdateTime": now_rfc3339()}}
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                cluster.namespace,
                PLURAL,
                cluster.name,
                body,
                _content_type=MERGE_PATCH,  # the client would send a dict as a JSON patch
                _request_timeout=10,
            )
        except kubernetes.client.ApiException as err:
            if err.status == 404:
                return  # deleted meanwhile: the next round tears it down
            raise
        cluster.last_status = status

    def _set_condition(self, cluster: _Cluster, type_: str, status: bool, reason: str, message: str) -> None:
        value = "True" if status else "False"
        old = cluster.conditions.get(type_)
        changed = old is None or old["status"] != value
        cluster.conditions[type_] = {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339() if changed else old["lastTransitionTime"],
        }

    def _set_state(self, cluster: _Cluster, state: str | None) -> None:
        if state is not None and state != cluster.state:
            cluster.state_times[state] = now_rfc3339()
        cluster.state = state if state is not None else cluster.state

    def _status(self, cluster: _Cluster, obj: dict[str, Any]) -> dict[str, Any]:
        spec = obj.get("spec", {})
        groups = spec.get("workerGroupSpecs") or []
        desired = sum(_desired_replicas(g) for g in groups)
        workers = [p for pods in cluster.workers.values() for p in pods]
        available = sum(1 for p in workers if p.alive)
        ready = sum(1 for p in workers if p.alive and p.ready)
        head = cluster.head
        head_ready = head is not None and head.alive and head.ready
        if cluster.suspended:
            self._set_condition(cluster, "HeadPodReady", False, "HeadPodNotFound", "Head Pod not found")
            self._set_condition(
                cluster, "RayClusterSuspended", True, "RayClusterSuspended", "All Ray Pods are deleted"
            )
            self._set_condition(
                cluster,
                "RayClusterProvisioned",
                False,
                "RayClusterPodsProvisioning",
                "RayCluster is suspended",
            )
            self._set_state(cluster, "suspended")
        else:
            # KubeRay keeps both conditions, False, on every cluster that is not suspended.
            self._set_condition(cluster, "RayClusterSuspended", False, "RayClusterSuspended", "")
            self._set_condition(cluster, "RayClusterSuspending", False, "RayClusterSuspending", "")
            if head_ready:
                self._set_condition(cluster, "HeadPodReady", True, "HeadPodRunningAndReady", "Head Pod ready")
            elif head is None:
                message = "Head Pod not found" + (
                    f" (it died and {DISABLE_HEAD_RESTART} is true)" if cluster.head_lost else ""
                )
                self._set_condition(cluster, "HeadPodReady", False, "HeadPodNotFound", message)
            else:
                self._set_condition(
                    cluster,
                    "HeadPodReady",
                    False,
                    "ContainersNotReady",
                    "containers with unready status: [ray-head]",
                )
            if head_ready and ready == desired and available == desired:
                cluster.provisioned = True
            if cluster.provisioned:
                self._set_condition(
                    cluster,
                    "RayClusterProvisioned",
                    True,
                    "AllPodRunningAndReadyFirstTime",
                    "All Ray Pods are ready for the first time",
                )
                self._set_state(cluster, "ready")
            else:
                self._set_condition(
                    cluster,
                    "RayClusterProvisioned",
                    False,
                    "RayClusterPodsProvisioning",
                    "RayCluster Pods are being provisioned for first time",
                )
                if cluster.state == "suspended":
                    cluster.state = None
        status: dict[str, Any] = {
            "conditions": [cluster.conditions[k] for k in sorted(cluster.conditions)],
            "desiredWorkerReplicas": desired,
            "availableWorkerReplicas": available,
            "readyWorkerReplicas": ready,
            "minWorkerReplicas": sum(int(g.get("minReplicas", 0) or 0) for g in groups),
            "maxWorkerReplicas": sum(int(g.get("maxReplicas", 0) or 0) for g in groups),
            "observedGeneration": obj["metadata"].get("generation", 1),
            **desired_resources(spec),
            "head": {
                "podIP": "127.0.0.1" if head is not None else None,
                "podName": head.name if head is not None else None,
                "serviceIP": "127.0.0.1",
                "serviceName": f"{cluster.name}-head-svc",
            },
            "endpoints": {k: str(v) for k, v in cluster.head_ports.items()},
            "state": cluster.state,
            "stateTransitionTimes": dict(cluster.state_times) or None,
            "reason": "; ".join(cluster.notes) or None,
        }
        return status


# ------------------------------------------------------------------------------------------ helpers


def _ray_command() -> list[str]:
    """``ray`` from this interpreter's environment (the same Python runs every Ray process)."""
    script = Path(sys.executable).with_name("ray")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def _ray_container(group_spec: dict[str, Any]) -> dict[str, Any]:
    """KubeRay's Ray container: the first one in the pod template."""
    containers = ((group_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0] if containers else {}


def _desired_replicas(group: dict[str, Any]) -> int:
    """KubeRay's desired count: replicas clamped to [minReplicas, maxReplicas]; 0 when suspended."""
    if group.get("suspend"):
        return 0
    replicas = int(group.get("replicas", 0) or 0)
    low = int(group.get("minReplicas", 0) or 0)
    high = group.get("maxReplicas")
    replicas = max(replicas, low)
    if high is not None:
        replicas = min(replicas, int(high))
    return replicas * int(group.get("numOfHosts", 1) or 1)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _marked_processes() -> Iterator[tuple[int, str]]:
    """(pid, marker value) of every live process carrying the local-KubeRay marker."""
    needle = f"{MARKER}=".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue  # a zombie holds no resources
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                for item in environ.read().split(b"\0"):
                    if item.startswith(needle):
                        yield int(entry.name), item[len(needle) :].decode(errors="replace")
                        break
        except (OSError, IndexError):
            continue


def kill_pod(marker: str) -> list[int]:
    """SIGKILL, at once, every process carrying ``marker``: a pod's container dying.

    Their process groups first (Ray starts job drivers in sessions of their own), then each
    process; returns the PIDs found.
    """
    pids = [pid for pid, value in _marked_processes() if value == marker]
    for group in {_pgid(pid) for pid in pids} - {None, os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _sweep(lambda value: value == marker)
    return pids


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _sweep(match: Any, timeout_s: float = 10.0) -> None:
    """SIGKILL every marked process whose marker matches, until none is left (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = [pid for pid, marker in _marked_processes() if match(marker)]
        if not pids or time.monotonic() > deadline:
            if pids:
                logger.error("local KubeRay: processes %s survived SIGKILL", pids)
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
