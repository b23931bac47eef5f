"""KubeRay played with real Pods: the RayCluster's own pod templates, run by a real kubelet.

KubeRay's Go operator cannot be built here (its modules are not reachable), so ``PodKubeRay``
does its part for ``ray.io/v1`` RayClusters on a cluster with a real node
(``testing.node``): what KubeRay v1.7 does, and no more. For each RayCluster it creates

- a head Service ``<cluster>-head-svc`` selecting the head Pod, with KubeRay's port names
  (KubeRay: ``ray-operator/controllers/ray/common/service.go``, ``BuildServiceForHeadPod``);
- a head Pod and one Pod per worker replica of each group, from the group's ``template``, named
  ``<cluster>-head-<suffix>`` and ``<cluster>-<group>-worker-<suffix>``, labelled ``ray.io/cluster``,
  ``ray.io/node-type``, ``ray.io/group`` (``headgroup`` for the head), ``ray.io/is-ray-node``,
  ``app.kubernetes.io/name: kuberay`` and ``app.kubernetes.io/created-by: kuberay-operator``, with
  the RayCluster as controller owner (KubeRay: ``common/pod.go``, ``DefaultHeadPodTemplate``,
  ``DefaultWorkerPodTemplate``, ``BuildPod``; labels from ``utils/constant.go``);
- the Ray container's command as KubeRay writes it: ``/bin/bash -lc --`` and
  ``ulimit -n 65536; ray start --head|--address=... --block <rayStartParams>`` with
  ``--num-cpus``/``--num-gpus``/``--memory`` from the container's limits when the params do not
  say (``generateRayStartCommand``), and its environment: ``RAY_CLUSTER_NAME``,
  ``RAY_CLOUD_INSTANCE_ID`` (the pod's name), ``RAY_NODE_TYPE_NAME`` (the group), ``RAY_PORT``,
  ``RAY_ADDRESS``, ``RAY_USAGE_STATS_KUBERAY_IN_USE``, ``KUBERAY_GEN_RAY_START_CMD``, and with
  ``authOptions.mode: token`` ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from the cluster's
  Secret (``setContainerEnvVars``, ``utils/constant.go``);
- the RayCluster's status from the Pods' real state: ``HeadPodReady`` and
  ``RayClusterProvisioned`` conditions, ``state``, ``head.podIP``/``serviceIP``/``podName``,
  ``endpoints``, worker replica counts (``controllers/ray/raycluster_controller.go``,
  ``calculateStatus``).

It scales groups to ``replicas`` (clamped to min/max), replaces a worker Pod that failed or was
deleted, and replaces a lost head unless the cluster is provisioned and annotated
``ray.io/disable-provisioned-head-restart: "true"`` (then ``HeadPodReady`` stays False). Pods and
the Service are owned by the RayCluster, so the real garbage collector removes them with it.

Where it differs from KubeRay, because this cluster has no DNS add-on and no kube-proxy: workers
reach the head at the head Pod's IP (KubeRay writes the Service's DNS name), and
``head.serviceIP`` is the head Pod's IP.
"""

from __future__ import annotations

import datetime
import json
import logging
import random
import string
import threading
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
HEAD_GROUP = "headgroup"
DISABLE_HEAD_RESTART = "ray.io/disable-provisioned-head-restart"
#: KubeRay's head Service ports (service.go) and the head container's defaults.
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
#: Ray's dashboard agent port, where a raylet's health is asked (KubeRay's default too).
AGENT_PORT = 52365
#: The probe's program: every URL answers ``success``.
_PROBE = (
    "import sys, urllib.request\n"
    "for url in sys.argv[1:]:\n"
    "    assert b'success' in urllib.request.urlopen(url, timeout=3).read()\n"
)
#: ``ray start`` options that take no value: ``"true"`` turns them on.
FLAG_PARAMS = frozenset({"disable-usage-stats", "no-redirect-output", "ray-debugger-external"})


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _suffix() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def _quantity_bytes(value: str) -> int | None:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}
    for unit, factor in units.items():
        if value.endswith(unit):
            return int(float(value[: -len(unit)]) * factor)
    return int(float(value)) if value.replace(".", "", 1).isdigit() else None


def _count(value: str) -> str:
    """A CPU/GPU quantity as Ray's whole count (``500m`` -> 1, as KubeRay rounds up)."""
    if value.endswith("m"):
        return str(max(1, -(-int(value[:-1]) // 1000)))
    return str(int(float(value)))


def ray_start_command(group_spec: dict[str, Any], *, head: bool, head_address: str | None) -> str:
    """KubeRay's ``ray start`` line for a group: rayStartParams, then what the limits imply."""
    params = {str(k): str(v) for k, v in (group_spec.get("rayStartParams") or {}).items()}
    container = group_spec["template"]["spec"]["containers"][0]
    resources = container.get("resources") or {}
    limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    if "num-cpus" not in params and "cpu" in limits:
        params["num-cpus"] = _count(str(limits["cpu"]))
    if "num-gpus" not in params and "nvidia.com/gpu" in limits:
        params["num-gpus"] = _count(str(limits["nvidia.com/gpu"]))
    if "memory" not in params and "memory" in limits and (memory := _quantity_bytes(str(limits["memory"]))):
        params["memory"] = str(memory)
    words = ["ray start", "--head" if head else f"--address={head_address}", "--block"]
    if head:
        params.setdefault("metrics-export-port", str(HEAD_PORTS["metrics"]))
        params.setdefault("dashboard-host", "0.0.0.0")
    # Values go in as given: KubeRay's resources are already quoted for the shell ("{\"name\": 1}").
    for key, value in sorted(params.items()):
        if key in FLAG_PARAMS:
            words += [f"--{key}"] if value.lower() == "true" else []
        else:
            words.append(f"--{key}={value}")
    return " ".join(words)


class PodKubeRay:
    """KubeRay's RayCluster controller, played with real Pods; a context manager (a thread)."""

    def __init__(
        self, api_client: kubernetes.client.ApiClient, namespaces: list[str], interval_s: float = 0.5
    ):
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.namespaces = list(namespaces)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-kuberay", daemon=True)
        self._provisioned: set[str] = set()
        self._head_lost: set[str] = set()
        self.errors: list[str] = []

    def __enter__(self) -> PodKubeRay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    # ------------------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for namespace in self.namespaces:
                try:
                    clusters = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
                        "items"
                    ]
                    for cluster in clusters:
                        if not cluster["metadata"].get("deletionTimestamp"):
                            self.reconcile(cluster)
                except Exception as err:  # noqa: BLE001 - a controller keeps going, as KubeRay's does
                    self.errors.append(repr(err))
                    logger.warning("pod KubeRay: %s", err)

    def reconcile(self, cluster: dict[str, Any]) -> None:
        meta, spec = cluster["metadata"], cluster["spec"]
        namespace, name = meta["namespace"], meta["name"]
        key = f"{namespace}/{name}"
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        for pod in live:
            if pod.status.phase == "Failed":  # KubeRay deletes failed Pods and makes new ones
                self._delete_pod(pod)
        live = [p for p in live if p.status.phase != "Failed"]
        heads = [p for p in live if p.metadata.labels.get("ray.io/node-type") == "head"]
        suspended = bool(spec.get("suspend"))
        self._ensure_service(cluster)
        if suspended:
            for pod in live:
                self._delete_pod(pod)
            live, heads = [], []
        elif not heads:
            no_restart = (meta.get("annotations") or {}).get(DISABLE_HEAD_RESTART) == "true"
            if key in self._provisioned and no_restart:
                self._head_lost.add(key)
            elif key not in self._head_lost:
                self.core.create_namespaced_pod(
                    namespace, self._pod(cluster, spec["headGroupSpec"], HEAD_GROUP, None)
                )
        head_ip = heads[0].status.pod_ip if heads else None
        for group in spec.get("workerGroupSpecs") or []:
            members = [p for p in live if p.metadata.labels.get("ray.io/group") == group["groupName"]]
            wanted = 0 if suspended or group.get("suspend") else _desired_replicas(group)
            for extra in sorted(members, key=lambda p: p.metadata.creation_timestamp, reverse=True)[
                : max(0, len(members) - wanted)
            ]:
                self._delete_pod(extra)
            if head_ip and not suspended:
                for _ in range(max(0, wanted - len(members))):
                    pod = self._pod(
                        cluster, group, group["groupName"], f"{head_ip}:{HEAD_PORTS['gcs-server']}"
                    )
                    self.core.create_namespaced_pod(namespace, pod)
        self._write_status(cluster, live, heads, suspended)

    # ------------------------------------------------------------------------------------- objects

    def _owner(self, cluster: dict[str, Any]) -> dict[str, Any]:
        meta = cluster["metadata"]
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RayCluster",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def _pod(self, cluster: dict[str, Any], group_spec: dict[str, Any], group: str, head_address: str | None):
        meta = cluster["metadata"]
        name, head = meta["name"], head_address is None
        template = json.loads(json.dumps(group_spec["template"]))
        pod_name = f"{name}-head-{_suffix()}" if head else f"{name}-{group}-worker-{_suffix()}"
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            "ray.io/cluster": name,
            "ray.io/node-type": "head" if head else "worker",
            "ray.io/group": group,
            "ray.io/identifier": f"{name}-{'head' if head else 'worker'}",
            "ray.io/is-ray-node": "yes",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator",
        }
        spec = template["spec"]
        container = spec["containers"][0]
        command = ray_start_command(group_spec, head=head, head_address=head_address)
        container["command"] = ["/bin/bash", "-lc", "--"]
        container["args"] = [f"ulimit -n 65536; {command}"]
        env = [e for e in container.get("env") or [] if e["name"] not in _KUBERAY_ENV]
        gcs = HEAD_PORTS["gcs-server"]
        env += [
            {"name": "RAY_CLUSTER_NAME", "value": name},
            {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "RAY_NODE_TYPE_NAME", "value": group},
            {"name": "RAY_PORT", "value": str(gcs)},
            {"name": "RAY_ADDRESS", "value": f"127.0.0.1:{gcs}" if head else head_address},
            {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"},
            {"name": "KUBERAY_GEN_RAY_START_CMD", "value": command},
        ]
        auth = cluster["spec"].get("authOptions") or {}
        if auth.get("mode") == "token":
            secret = {"name": auth.get("secretName") or f"{name}", "key": "auth_token"}
            env += [
                {"name": "RAY_AUTH_MODE", "value": "token"},
                {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": secret}},
            ]
        container["env"] = env
        # KubeRay injects readiness and liveness probes when the template has none (v1.1+): the
        # raylet's health through the dashboard agent, and on the head the GCS's through the
        # dashboard. It asks with wget; the trainer image has Python.
        checks = [f"http://127.0.0.1:{AGENT_PORT}/api/local_raylet_healthz"]
        if head:
            checks.append(f"http://127.0.0.1:{HEAD_PORTS['dashboard']}/api/gcs_healthz")
        probe = {
            "exec": {"command": ["python3", "-c", _PROBE, *checks]},
            "initialDelaySeconds": 5,
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 10,
        }
        container.setdefault("readinessProbe", probe)
        if head:
            ports = {p.get("name"): p for p in container.get("ports") or []}
            for port_name, port in HEAD_PORTS.items():
                ports.setdefault(port_name, {"name": port_name, "containerPort": port})
            container["ports"] = list(ports.values())
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": labels,
                "ownerReferences": [self._owner(cluster)],
            },
            "spec": spec,
        }

    def _ensure_service(self, cluster: dict[str, Any]) -> None:
        meta = cluster["metadata"]
        name = f"{meta['name']}-head-svc"
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "ownerReferences": [self._owner(cluster)],
            },
            "spec": {
                "selector": {"ray.io/cluster": meta["name"], "ray.io/node-type": "head"},
                "ports": [{"name": n, "port": p, "targetPort": p} for n, p in HEAD_PORTS.items()],
            },
        }
        try:
            self.core.create_namespaced_service(meta["namespace"], service)
        except ApiException as err:
            if err.status != 409:
                raise

    def _delete_pod(self, pod: Any) -> None:
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as err:
            if err.status != 404:
                raise

    # -------------------------------------------------------------------------------------- status

    def _write_status(
        self, cluster: dict[str, Any], live: list[Any], heads: list[Any], suspended: bool
    ) -> None:
        meta, spec = cluster["metadata"], cluster["spec"]
        key = f"{meta['namespace']}/{meta['name']}"
        groups = spec.get("workerGroupSpecs") or []
        desired = 0 if suspended else sum(_desired_replicas(g) for g in groups if not g.get("suspend"))
        workers = [p for p in live if p.metadata.labels.get("ray.io/node-type") == "worker"]
        running = [p for p in workers if p.status.phase == "Running"]
        ready = [p for p in running if _ready(p)]
        head = heads[0] if heads else None
        head_ready = head is not None and _ready(head)
        if head_ready and len(ready) == desired:
            self._provisioned.add(key)
        old = {c["type"]: c for c in (cluster.get("status") or {}).get("conditions") or []}

        def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
            status = "True" if ok else "False"
            same = old.get(kind, {}).get("status") == status
            since = old[kind]["lastTransitionTime"] if same else now_rfc3339()
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
            }

        if head_ready:
            head_condition = condition("HeadPodReady", True, "HeadPodRunningAndReady", "Head Pod ready")
        elif head is None:
            head_condition = condition("HeadPodReady", False, "HeadPodNotFound", "Head Pod not found")
        else:
            head_condition = condition(
                "HeadPodReady", False, "ContainersNotReady", "containers with unready status: [ray-head]"
            )
        provisioned = key in self._provisioned and not suspended
        conditions = [
            head_condition,
            condition(
                "RayClusterProvisioned",
                provisioned,
                "AllPodRunningAndReadyFirstTime" if provisioned else "RayClusterPodsProvisioning",
                "All Ray Pods are ready for the first time"
                if provisioned
                else "RayCluster Pods are being provisioned for first time",
            ),
        ]
        if suspended:
            conditions.append(
                condition("RayClusterSuspended", True, "RayClusterSuspended", "All Ray Pods are deleted")
            )
        head_ip = head.status.pod_ip if head is not None else None
        status = {
            "conditions": conditions,
            "state": "suspended" if suspended else "ready" if provisioned else None,
            "desiredWorkerReplicas": desired,
            "availableWorkerReplicas": len(running),
            "readyWorkerReplicas": len(ready),
            "minWorkerReplicas": sum(int(g.get("minReplicas", 0) or 0) for g in groups),
            "maxWorkerReplicas": sum(int(g.get("maxReplicas", 0) or 0) for g in groups),
            "observedGeneration": meta.get("generation", 1),
            "head": {
                "podIP": head_ip,
                "podName": head.metadata.name if head is not None else None,
                "serviceIP": head_ip,  # no kube-proxy: the Service's address would lead nowhere
                "serviceName": f"{meta['name']}-head-svc",
            },
            "endpoints": {name: str(port) for name, port in HEAD_PORTS.items()},
        }
        if status == {k: (cluster.get("status") or {}).get(k) for k in status}:
            return
        status["lastUpdateTime"] = now_rfc3339()
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"status": status}
            )
        except ApiException as err:
            if err.status != 404:
                raise


_KUBERAY_ENV = frozenset(
    {
        "RAY_CLUSTER_NAME",
        "RAY_CLOUD_INSTANCE_ID",
        "RAY_NODE_TYPE_NAME",
        "RAY_PORT",
        "RAY_ADDRESS",
        "RAY_USAGE_STATS_KUBERAY_IN_USE",
        "KUBERAY_GEN_RAY_START_CMD",
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
    }
)


def _desired_replicas(group: dict[str, Any]) -> int:
    replicas = int(group.get("replicas", 0) or 0)
    low, high = int(group.get("minReplicas", 0) or 0), group.get("maxReplicas")
    replicas = max(replicas, low)
    return min(replicas, int(high)) if high is not None else replicas


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
