"""Kueue's own controller against a test control plane, as its manifests run it.

The binary is built here from Kueue's Go module at the version ``parts.toml`` pins (``make
kueue``); its CRDs, RBAC and webhook configurations are that module's own (``config/components``),
never a copy. What a cluster install does with a Deployment and a Service is done for a process:

- Its identity is the manifests': the ServiceAccount ``kueue-system/kueue-controller-manager``
  bound to the ClusterRole of ``config/components/rbac/role.yaml``, with a real token.
- Its configuration is the manifests' ``Configuration`` (``controller_manager_config.yaml``) with
  what a one-replica install on this machine changes: leader election off, the RayCluster
  integration as the only framework (``integrations.frameworks: [ray.io/raycluster]``), servers on
  free 127.0.0.1 ports, and ``internalCertManagement.enable: false``: its certificates are made
  here, signed by the control plane's CA, as cert-manager would.
- Its webhooks (mutating, validating, and the CRDs' conversion) are the module's, those of
  Kueue's own resources and of RayClusters, with the Service reference turned into the URL the
  process serves on (the API server runs on this machine) and the CA bundle filled in.
- Kueue reads its metrics certificate from a fixed path (``/etc/kueue/metrics/certs``); the process
  runs in a mount namespace of its own with an overlay on ``/etc`` that holds it, so this
  machine's ``/etc`` is never written.

    with KueueController(plane) as kueue:  # once KubeRay's CRDs are installed
        kueue.apply_queues(...)

``stop()`` removes the webhook configurations before it ends the process: an API server must not
be left calling a webhook that no longer answers (RayClusters could not be created). Its CRDs
and objects stay, as ``helm uninstall`` leaves CRDs.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from rltrainer_operator.testing import parts
from rltrainer_operator.testing.envtest import ControlPlane, Processes, free_port, http_ok

NAMESPACE, ACCOUNT = "kueue-system", "kueue-controller-manager"
#: The integration rltrainer needs; Kueue's webhooks of other kinds are not installed.
FRAMEWORKS = ("ray.io/raycluster",)
#: Kueue's on-demand visibility API is an aggregated API server (an APIService): not used here.
FEATURE_GATES = "VisibilityOnDemand=false"
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"
WEBHOOK_CONFIGURATIONS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")
API_VERSION = "kueue.x-k8s.io/v1beta2"


def components(part: str = "kueue") -> Path:
    return parts.module_dir(part) / "config" / "components"


def crd_documents(webhook_url: str | None = None, ca_bundle: str | None = None) -> list[dict[str, Any]]:
    """The module's CRDs; with ``webhook_url``, those Kueue's manifests convert by webhook
    (``crd/patches/webhook_in_*.yaml``) convert through it."""
    folder = components() / "crd"
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    converted = {
        yaml.safe_load((folder / patch["path"]).read_text())["metadata"]["name"]
        for patch in kustomization.get("patches", [])
        if Path(patch["path"]).name.startswith("webhook_in_")
    }
    listed = kustomization["resources"]
    documents = []
    for relative in listed:
        crd = yaml.safe_load((folder / relative).read_text())
        if webhook_url and crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"{webhook_url}/convert", "caBundle": ca_bundle},
                    "conversionReviewVersions": ["v1"],
                },
            }
        documents.append(crd)
    return documents


def _webhook_kept(webhook: dict[str, Any]) -> bool:
    """Kueue's own resources' webhooks and the enabled integrations' (RayClusters)."""
    for rule in webhook.get("rules", []):
        if "kueue.x-k8s.io" in rule.get("apiGroups", []):
            return True
        if "ray.io" in rule.get("apiGroups", []) and "rayclusters" in rule.get("resources", []):
            return True
    return False


def webhook_configurations(webhook_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The module's webhook configurations (``webhook/manifests.yaml``), named as its install
    names them, with the kept webhooks calling ``webhook_url``."""
    documents = [
        doc for doc in yaml.safe_load_all((components() / "webhook" / "manifests.yaml").read_text()) if doc
    ]
    configurations = []
    for doc, name in zip(documents, WEBHOOK_CONFIGURATIONS, strict=True):
        kept = [hook for hook in doc["webhooks"] if _webhook_kept(hook)]
        for hook in kept:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": ca_bundle}
        configurations.append({**doc, "metadata": {"name": name}, "webhooks": kept})
    return configurations


class KueueController:
    """Kueue's controller process for ``plane``; a context manager. ``plane`` must have KubeRay's
    CRDs (the RayCluster integration needs its kind)."""

    def __init__(
        self, plane: ControlPlane, binary: Path | None = None, *, ready_timeout_s: float = 120.0
    ) -> None:
        self.plane = plane
        self.binary = Path(binary) if binary is not None else parts.build("kueue")
        self.ready_timeout_s = ready_timeout_s
        self.root = plane.root / "kueue"
        self._procs = Processes(self.root / "logs")
        self._overlay: Path | None = None
        self.webhook_url = ""

    def start(self) -> KueueController:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            certs = self.root / "certs"
            ca_bundle = self.plane.serving_certificate(certs, "kueue-webhook", ["127.0.0.1"])
            webhook_port, metrics_port, probe_port = free_port(), free_port(), free_port()
            self.webhook_url = f"https://127.0.0.1:{webhook_port}"
            self.plane.apply_objects(crd_documents(self.webhook_url, ca_bundle), server_side=True)
            kubeconfig = self._identity()
            config = self.root / "controller_manager_config.yaml"
            config.write_text(
                yaml.safe_dump(self._configuration(certs, webhook_port, metrics_port, probe_port))
            )
            self._overlay = Path(tempfile.mkdtemp(prefix="kueue-etc-", dir=self.root))
            self._procs.launch(
                "kueue",
                self._in_own_mounts(
                    certs, [str(self.binary), f"--config={config}", f"--feature-gates={FEATURE_GATES}"]
                ),
                env={"KUBECONFIG": str(kubeconfig)},
            )
            self._procs.wait(
                "kueue", lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"), self.ready_timeout_s
            )
            self.plane.apply_objects(webhook_configurations(self.webhook_url, ca_bundle))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.webhook_url:
            self.plane.kubectl_run(
                "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                *WEBHOOK_CONFIGURATIONS, "--ignore-not-found", check=False,
            )  # fmt: skip
        self._procs.end("kueue")
        if self._overlay is not None:
            shutil.rmtree(self._overlay, ignore_errors=True)
            self._overlay = None

    def __enter__(self) -> KueueController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exit_code(self) -> int | None:
        return self._procs.exit_code("kueue")

    def log_tail(self, lines: int = 40) -> str:
        return self._procs.log_tail("kueue", lines)

    # --- queues -----------------------------------------------------------------------------
    def apply_queues(self, *objects: dict[str, Any]) -> None:
        """Create or update Kueue objects (``cluster_queue``, ``local_queue``, ...) as admin."""
        self.plane.apply_objects(list(objects))

    # --- set-up -----------------------------------------------------------------------------
    def _configuration(
        self, certs: Path, webhook_port: int, metrics_port: int, probe_port: int
    ) -> dict[str, Any]:
        config = yaml.safe_load((components() / "manager" / "controller_manager_config.yaml").read_text())
        config.update(
            namespace=NAMESPACE,
            health={"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
            metrics={"bindAddress": f"127.0.0.1:{metrics_port}"},
            webhook={"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            leaderElection={"leaderElect": False},
            internalCertManagement={"enable": False},
            integrations={"frameworks": list(FRAMEWORKS)},
        )
        return config

    def _in_own_mounts(self, certs: Path, argv: list[str]) -> list[str]:
        """``argv`` in a private mount namespace whose ``/etc`` is an overlay holding the metrics
        certificate at Kueue's fixed path (this machine's ``/etc`` is untouched)."""
        upper, work = self._overlay / "upper", self._overlay / "work"
        target = upper / METRICS_CERT_DIR.removeprefix("/etc/")
        target.mkdir(parents=True)
        work.mkdir()
        for name in ("tls.crt", "tls.key"):
            shutil.copy2(certs / name, target / name)
        script = (
            f'mount -t overlay overlay -o "lowerdir=/etc,upperdir={upper},workdir={work}" /etc && exec "$@"'
        )
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "kueue", *argv]

    def _identity(self) -> Path:
        """The manifests' ServiceAccount and ClusterRole (from the module), and a kubeconfig for it."""
        rbac = components() / "rbac"
        role = yaml.safe_load((rbac / "role.yaml").read_text())
        role["metadata"]["name"] = "kueue-manager-role"
        kubeconfig = self.plane.cluster_role_kubeconfig(NAMESPACE, ACCOUNT, role, self.root / "kubeconfig")
        # The Secrets of its own namespace (MultiKueue's cluster credentials), by a Role there.
        secrets_role = yaml.safe_load((rbac / "manager_secrets_role.yaml").read_text())
        binding = yaml.safe_load((rbac / "manager_secrets_role_binding.yaml").read_text())
        secrets_role["metadata"] = {"name": "kueue-manager-secrets-role", "namespace": NAMESPACE}
        binding["metadata"] = {"name": "kueue-manager-secrets-rolebinding", "namespace": NAMESPACE}
        binding["roleRef"]["name"] = secrets_role["metadata"]["name"]
        binding["subjects"] = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
        self.plane.apply_objects([secrets_role, binding])
        return kubeconfig


# --- the queueing objects of a shared cluster ----------------------------------------------------
def resource_flavor(name: str = "default-flavor") -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}}


def cluster_queue(
    name: str,
    quota: dict[str, str],
    *,
    flavor: str = "default-flavor",
    preempt_lower_priority: bool = True,
    namespaces: str | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with ``quota`` (``{"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}``) of
    one flavor, admitting workloads of every namespace (or those labelled
    ``kubernetes.io/metadata.name: <namespaces>``), preempting lower priorities within itself."""
    spec: dict[str, Any] = {
        "namespaceSelector": (
            {"matchLabels": {"kubernetes.io/metadata.name": namespaces}} if namespaces else {}
        ),
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": resource, "nominalQuota": value} for resource, value in quota.items()
                        ],
                    }
                ],
            }
        ],
    }
    if preempt_lower_priority:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def workload_priority_class(name: str, value: int, description: str = "") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": description,
    }


def one_gpu_queues(namespace: str, queue: str, cluster_queue_name: str) -> list[dict[str, Any]]:
    """The tests' shared GPU cluster as a platform team sets it up (docs/guide/shared-clusters.md):
    a flavor, a ClusterQueue whose quota holds one ``nvidia.com/gpu`` (and more CPU and memory
    than the experiments ask for, so that the GPU is what binds), a LocalQueue in ``namespace``,
    and the priority classes ``low`` (100) and ``high`` (1000)."""
    return [
        resource_flavor(),
        cluster_queue(cluster_queue_name, {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "1"}),
        local_queue(queue, namespace, cluster_queue_name),
        workload_priority_class("low", 100, "experiments that may wait"),
        workload_priority_class("high", 1000, "experiments that preempt"),
    ]
