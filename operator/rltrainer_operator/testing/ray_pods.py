"""A test's hands on the Pods real KubeRay made: what a person does with ``kubectl`` and a node's
container runtime, and what they read back.

KubeRay's operator (``testing.kuberay``) creates and replaces the Pods; ``RayPods`` only looks at
them and breaks them: ``pods`` by group, ``delete_worker`` (``kubectl delete pod``),
``kill_worker``/``kill_head`` (the Ray container's first process ended with SIGKILL through its
node's containerd: a crash, to the kubelet), ``restarts`` per group (Pods KubeRay created beyond
the group's size, from its own ``Created*Pod`` events, plus container restarts the kubelets
made) and ``processes`` (Pods still there, terminating ones included). Its methods mirror the
process stand-in's (``LocalKubeRay``), so a journey runs on either; ``errors`` lists what went
wrong in KubeRay itself (its process gone, a panic in its log).
"""

from __future__ import annotations

from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from rltrainer_operator.testing.kuberay import KubeRayOperator

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
HEAD_GROUP = "headgroup"


class RayPods:
    """Real KubeRay's Pods of every RayCluster, seen through ``api_client``; ``nodes``: the
    ``testing.node`` nodes they run on (``kill_*`` reach containers through them)."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        nodes: list[Any],
        operator: KubeRayOperator | None = None,
    ) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.nodes = {node.name: node for node in nodes}
        self.operator = operator

    @property
    def errors(self) -> list[str]:
        """KubeRay's own failures: its process gone, or a Go panic in its log."""
        if self.operator is None:
            return []
        found = []
        if (code := self.operator.exit_code()) is not None:
            found.append(f"KubeRay's operator exited ({code}):\n{self.operator.log_tail()}")
        found += [
            r.get("msg", "") for r in self.operator.log_lines() if "panic" in str(r.get("msg", "")).lower()
        ]
        return found

    def pods(self, namespace: str, name: str) -> dict[str, list[Any]]:
        """The cluster's Pods not being deleted, by group (``headgroup`` and each worker group)."""
        found: dict[str, list[Any]] = {}
        for pod in self._live_pods(namespace, name):
            found.setdefault(pod.metadata.labels.get("ray.io/group", "?"), []).append(pod)
        return found

    def processes(self, namespace: str | None = None, name: str | None = None) -> list[str]:
        """Names of the Ray Pods (of one cluster, or of every RayCluster) still there, terminating
        ones included (empty once all are gone)."""
        selector = f"ray.io/cluster={name}" if name else "ray.io/cluster"
        if namespace is None:
            pods = self.core.list_pod_for_all_namespaces(label_selector=selector).items
        else:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]

    def delete_worker(self, namespace: str, name: str, group: str, index: int = 0) -> str:
        """``kubectl delete pod`` of one worker Pod of ``group`` (graceful); returns its name."""
        pod = self.pods(namespace, name)[group][index]
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, namespace)
        except ApiException as err:
            if err.status != 404:
                raise
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
        """Per group: Pods KubeRay created beyond the group's size (its ``CreatedHeadPod`` and
        ``CreatedWorkerPod`` events), plus the kubelets' container restarts in live Pods."""
        cluster = self._cluster(namespace, name)
        if cluster is None:
            return {}
        sizes = {HEAD_GROUP: 1}
        sizes.update(
            {g["groupName"]: int(g.get("replicas") or 0) for g in cluster["spec"].get("workerGroupSpecs", [])}
        )
        created: dict[str, int] = {}
        events = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.uid={cluster['metadata']['uid']}"
        ).items
        for event in events:
            if event.reason not in ("CreatedHeadPod", "CreatedWorkerPod"):
                continue
            pod_name = event.message.rsplit("/", 1)[-1]
            group = HEAD_GROUP if event.reason == "CreatedHeadPod" else _group_of(pod_name, name, sizes)
            created[group] = created.get(group, 0) + (event.count or 1)
        counts = {group: max(0, made - sizes.get(group, 0)) for group, made in created.items()}
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
        """The Pods of RayCluster ``name`` not being deleted (not those of a namesake the garbage
        collector has yet to remove)."""
        cluster = self._cluster(namespace, name)
        if cluster is None:
            return []
        uid = cluster["metadata"]["uid"]
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}").items
        return [
            p
            for p in pods
            if p.metadata.deletion_timestamp is None
            and any(ref.uid == uid for ref in p.metadata.owner_references or [])
        ]

    def _cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise


def _group_of(pod_name: str, cluster: str, groups: dict[str, int]) -> str:
    """A worker Pod's group from KubeRay's name for it: ``<cluster>-<group>-worker-<suffix>``."""
    for group in groups:
        if pod_name.startswith(f"{cluster}-{group}-worker-"):
            return group
    return "?"


def running_container(pod: Any) -> Any | None:
    """The status of the Pod's first running container (a kubernetes client object), if any."""
    running = [c for c in pod.status.container_statuses or [] if c.state.running and c.container_id]
    return running[0] if running else None
