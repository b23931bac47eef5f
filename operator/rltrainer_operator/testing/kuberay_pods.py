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
the Service are owned by the RayCluster, so the real garbage collector removes them with it. A
container that exits is restarted in its Pod by the kubelet (the templates' ``restartPolicy``,
``Always`` by default), as on a cluster.

For tests it also does what a person does with ``kubectl`` and a node's runtime: ``delete_worker``
(``kubectl delete pod``), ``kill_worker``/``kill_head`` (the Ray container's first process ended
with SIGKILL on its node: ``Node.kill_container``), and counts ``restarts`` per group (Pods it
replaced plus container restarts the kubelet made). Its methods mirror ``LocalKubeRay``'s, so a
journey runs on either.

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
        self,
        api_client: kubernetes.client.ApiClient,
        namespaces: list[str] | None = None,
        interval_s: float = 0.5,
        nodes: list[Any] | None = None,
    ):
        """``namespaces``: those to watch (None: every namespace). ``nodes``: the ``testing.node``
        nodes the Pods run on, by which ``kill_*`` reach a container."""
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.namespaces = None if namespaces is None else list(namespaces)
        self.nodes = {node.name: node for node in nodes or []}
        self.interval_s = interval_s
        # Per RayCluster object (by uid: a cluster recreated under its name starts afresh):
        self._replaced: dict[str, dict[str, int]] = {}  # uid -> group -> Pods replaced
        self._full_at: dict[tuple[str, str], int] = {}  # (uid, group) -> replicas once all existed
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
            try:
                clusters = self._list_clusters()
            except Exception as err:  # noqa: BLE001 - a controller keeps going, as KubeRay's does
                self._note(err)
                continue
            for cluster in clusters:
                if cluster["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    self.reconcile(cluster)
                except ApiException as err:
                    # A namespace being deleted refuses new objects (403), the object changed
                    # meanwhile (409), or it went (404): KubeRay requeues; so does this loop.
                    if err.status not in (403, 404, 409):
                        self._note(err)
                except Exception as err:  # noqa: BLE001
                    self._note(err)

    def _list_clusters(self) -> list[dict[str, Any]]:
        if self.namespaces is None:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        found = []
        for namespace in self.namespaces:
            found += self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        return found

    def _note(self, err: Exception) -> None:
        self.errors.append(repr(err))
        logger.warning("pod KubeRay: %s", err)

    # ------------------------------------------------------------------------------ for the tests

    def pods(self, namespace: str, name: str) -> dict[str, list[Any]]:
        """The cluster's Pods not being deleted, by group (``headgroup`` and each worker group)."""
        found: dict[str, list[Any]] = {}
        for pod in self._live_pods(namespace, name):
            found.setdefault(pod.metadata.labels.get("ray.io/group", "?"), []).append(pod)
        return found

    def processes(self, namespace: str | None = None, name: str | None = None) -> list[str]:
        """Names of the Pods (of one cluster, or of every RayCluster) still there, terminating
        ones included: ``LocalKubeRay.processes``'s counterpart (empty once all are gone)."""
        selector = f"ray.io/cluster={name}" if name else "ray.io/cluster"
        if namespace is None:
            pods = self.core.list_pod_for_all_namespaces(label_selector=selector).items
        else:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]

    def delete_worker(self, namespace: str, name: str, group: str, index: int = 0) -> str:
        """``kubectl delete pod`` of one worker Pod of ``group`` (graceful); returns its name."""
        pod = self.pods(namespace, name)[group][index]
        self._delete_pod(pod)
        return pod.metadata.name

    def kill_worker(self, namespace: str, name: str, group: str, index: int = 0) -> str:
        """SIGKILL the Ray container's first process in one worker Pod of ``group`` (the kubelet
        restarts the container, Ray's node comes back with a new identity); returns the Pod's name."""
        return self._kill(self.pods(namespace, name)[group][index])

    def kill_head(self, namespace: str, name: str) -> str:
        """SIGKILL the head container's first process (the GCS and the job drivers go with it)."""
        heads = self.pods(namespace, name).get(HEAD_GROUP)
        if not heads:
            raise LookupError(f"{namespace}/{name} has no head pod")
        return self._kill(heads[0])

    def restarts(self, namespace: str, name: str) -> dict[str, int]:
        """Per group: Pods replaced after the group was complete, plus container restarts."""
        uid = self._uid(namespace, name)
        counts = dict(self._replaced.get(uid, {})) if uid else {}
        for pod in self._live_pods(namespace, name):
            group = pod.metadata.labels.get("ray.io/group", "?")
            restarted = sum(c.restart_count for c in pod.status.container_statuses or [])
            counts[group] = counts.get(group, 0) + restarted
        return {group: count for group, count in counts.items() if count}

    def _kill(self, pod: Any) -> str:
        node = self.nodes.get(pod.spec.node_name)
        if node is None:
            raise LookupError(f"pod {pod.metadata.name} runs on {pod.spec.node_name}, not a node given")
        container = running_container(pod)
        if container is None:
            raise LookupError(f"pod {pod.metadata.name} has no running container")
        node.kill_container(container.container_id)
        return pod.metadata.name

    def _live_pods(self, namespace: str, name: str) -> list[Any]:
        uid = self._uid(namespace, name)
        return self._owned_pods(namespace, name, uid) if uid else []

    def _owned_pods(self, namespace: str, name: str, uid: str) -> list[Any]:
        """The Pods of RayCluster ``uid`` not being deleted (not those of a namesake the garbage
        collector has yet to remove)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}").items
        return [
            p
            for p in pods
            if p.metadata.deletion_timestamp is None
            and any(ref.uid == uid for ref in p.metadata.owner_references or [])
        ]

    def _uid(self, namespace: str, name: str) -> str | None:
        try:
            cluster = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return cluster["metadata"]["uid"]

    def reconcile(self, cluster: dict[str, Any]) -> None:
        meta, spec = cluster["metadata"], cluster["spec"]
        namespace, name = meta["namespace"], meta["name"]
        key = meta["uid"]
        live = self._owned_pods(namespace, name, key)
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
                if (key, HEAD_GROUP) in self._full_at:
                    self._count_replacement(key, HEAD_GROUP, 1)
                self._full_at[(key, HEAD_GROUP)] = 1
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
            if wanted and len(members) >= wanted:
                self._full_at[(key, group["groupName"])] = wanted
            if head_ip and not suspended:
                missing = max(0, wanted - len(members))
                if self._full_at.get((key, group["groupName"])) == wanted:  # not a scale-up
                    self._count_replacement(key, group["groupName"], missing)
                for _ in range(missing):
                    pod = self._pod(
                        cluster, group, group["groupName"], f"{head_ip}:{HEAD_PORTS['gcs-server']}"
                    )
                    self.core.create_namespaced_pod(namespace, pod)
        self._write_status(cluster, live, heads, suspended)

    def _count_replacement(self, key: str, group: str, new_pods: int) -> None:
        """New Pods for a group that was complete at this size are replacements."""
        if new_pods:
            counts = self._replaced.setdefault(key, {})
            counts[group] = counts.get(group, 0) + new_pods

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
        key = meta["uid"]
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


def running_container(pod: Any) -> Any | None:
    """The status of the Pod's first running container (a kubernetes client object), if any."""
    running = [c for c in pod.status.container_statuses or [] if c.state.running and c.container_id]
    return running[0] if running else None


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
