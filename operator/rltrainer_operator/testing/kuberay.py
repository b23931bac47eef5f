"""KubeRay's own operator against a test control plane, run as its Helm chart runs it.

The binary is built here from KubeRay's Go module at the version ``parts.toml`` pins (``make
kuberay``); its CRDs are that module's own (``config/crd/bases``), never a copy, and its identity
is the chart's: a ServiceAccount ``kuberay-system/kuberay-operator`` bound to the ClusterRole of
the module's ``config/rbac/role.yaml``, with a real token. The flags are the chart's defaults for
one replica: leader election off, the chart's feature gates, metrics on, one reconcile at a time
(unless asked for more),
the chart's client QPS and burst; metrics and health probes on free 127.0.0.1 ports; no webhook.

    install_crds(plane)                      # once per control plane
    with KubeRayOperator(plane) as kuberay:  # then RayClusters become Pods and Services
        ...

Everything KubeRay then does (Pods with its command, probes, init container and ``/dev/shm``, the
headless head Service, the RayCluster's status) is its own. Stopping it stops only the process:
what it created stays until its RayClusters are deleted (the garbage collector owns the rest).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rltrainer_operator.testing import parts
from rltrainer_operator.testing.envtest import ControlPlane, Processes, free_port, http_ok

NAMESPACE, ACCOUNT = "kuberay-system", "kuberay-operator"
#: The chart's ``featureGates`` defaults for v1.6 (helm-chart/kuberay-operator/values.yaml).
FEATURE_GATES = (
    "RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true,"
    "RayServiceIncrementalUpgrade=true,RayCronJob=false"
)
#: The chart's ``kubeClient`` defaults.
QPS, BURST = 100, 200


def crd_files(part: str = "kuberay") -> list[Path]:
    """The module's own CRDs (RayCluster, RayJob, RayService, RayCronJob)."""
    return sorted((parts.module_dir(part) / "config" / "crd" / "bases").glob("ray.io_*.yaml"))


def raycluster_crd(part: str = "kuberay") -> dict[str, Any]:
    """The module's RayCluster CRD, parsed."""
    (path,) = [p for p in crd_files(part) if p.name == "ray.io_rayclusters.yaml"]
    return yaml.safe_load(path.read_text())


def install_crds(plane: ControlPlane, part: str = "kuberay") -> None:
    """KubeRay's CRDs into ``plane`` as its docs install them (server-side apply)."""
    plane.install_crds(*crd_files(part))


class KubeRayOperator:
    """KubeRay's operator process for ``plane``; a context manager.

    ``namespaces``: the chart's ``watchNamespace`` (None: every namespace). ``env``: the chart's
    ``env`` (e.g. ``{"ENABLE_PROBES_INJECTION": "false"}``). ``reconcile_concurrency``: the
    chart's ``reconcileConcurrency`` (its default, 1: one RayCluster reconciled at a time)."""

    def __init__(
        self,
        plane: ControlPlane,
        binary: Path | None = None,
        *,
        namespaces: list[str] | None = None,
        env: dict[str, str] | None = None,
        ready_timeout_s: float = 120.0,
        reconcile_concurrency: int = 1,
    ) -> None:
        if reconcile_concurrency < 1:
            raise ValueError(f"reconcile_concurrency must be at least 1, not {reconcile_concurrency}")
        self.plane = plane
        self.reconcile_concurrency = reconcile_concurrency
        self.binary = Path(binary) if binary is not None else parts.build("kuberay")
        self.namespaces = list(namespaces or [])
        self.env = dict(env or {})
        self.ready_timeout_s = ready_timeout_s
        self.root = plane.root / "kuberay"
        self._procs = Processes(self.root / "logs")
        self.metrics_port = 0

    def start(self) -> KubeRayOperator:
        try:
            kubeconfig = self._identity()
            self.metrics_port, probe_port = free_port(), free_port()
            args = [
                str(self.binary),
                f"--metrics-addr=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{probe_port}",
                "--enable-leader-election=false",
                "--enable-metrics=true",
                f"--reconcile-concurrency={self.reconcile_concurrency}",
                f"--qps={QPS}",
                f"--burst={BURST}",
                "--log-stdout-encoder=json",
                f"--feature-gates={FEATURE_GATES}",
            ]
            if self.namespaces:
                args.append(f"--watch-namespace={','.join(self.namespaces)}")
            self._procs.launch("kuberay-operator", args, env={"KUBECONFIG": str(kubeconfig), **self.env})
            self._procs.wait(
                "kuberay-operator",
                lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"),
                self.ready_timeout_s,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._procs.end("kuberay-operator")

    def __enter__(self) -> KubeRayOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exit_code(self) -> int | None:
        """The operator's exit status when it ended by itself (it never should), else None."""
        return self._procs.exit_code("kuberay-operator")

    @property
    def pid(self) -> int | None:
        """The operator process's id while it runs (for its memory and CPU time)."""
        return self._procs.pid("kuberay-operator")

    def log_tail(self, lines: int = 40) -> str:
        return self._procs.log_tail("kuberay-operator", lines)

    def log_lines(self) -> list[dict[str, Any]]:
        """The operator's JSON log records so far."""
        records = []
        path = self.root / "logs" / "kuberay-operator.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def _identity(self) -> Path:
        """The chart's ServiceAccount and ClusterRole (from the module), and a kubeconfig for it."""
        role = yaml.safe_load((parts.module_dir("kuberay") / "config" / "rbac" / "role.yaml").read_text())
        role["metadata"]["name"] = ACCOUNT
        return self.plane.cluster_role_kubeconfig(NAMESPACE, ACCOUNT, role, self.root / "kubeconfig")
