"""Cluster DNS for the test nodes: CoreDNS (built from its Go module, ``parts.py``) with its
``kubernetes`` plugin, as a cluster's DNS add-on serves it.

Pods resolve ``<service>.<namespace>.svc.cluster.local`` (a headless Service: its ready Pods'
addresses, and with ``publishNotReadyAddresses`` every Pod's) and ``<pod-ip-dashed>.<namespace>.pod
.cluster.local``, which is what real KubeRay gives its workers as the head's address. It listens
on the pod network's gateway, an address of this machine that Pods reach, and forwards nothing:
a name outside the cluster's zones gets NXDOMAIN at once (nothing leaves this machine).

CoreDNS reads the API server as the ServiceAccount ``kube-system/coredns``, bound to the
ClusterRole CoreDNS's own deployment manifests give it (``system:coredns``: read Services,
EndpointSlices, Pods and Namespaces), so its RBAC is exercised too.

    with ClusterDNS(plane, binary, address="10.244.0.1") as dns:
        kubelet config: clusterDNS [dns.address], clusterDomain dns.domain
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rltrainer_operator.testing.envtest import ControlPlane, Processes, free_port, http_ok

DOMAIN = "cluster.local"
NAMESPACE, ACCOUNT = "kube-system", "coredns"
#: CoreDNS's ClusterRole as its deployment manifests define it (coredns/deployment, kubernetes/).
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "system:coredns"},
    "rules": [
        {
            "apiGroups": [""],
            "resources": ["endpoints", "services", "pods", "namespaces"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ],
}


class ClusterDNS:
    """One CoreDNS serving ``domain`` from ``plane`` on ``address``:53; a context manager."""

    def __init__(
        self,
        plane: ControlPlane,
        binary: Path,
        *,
        address: str,
        domain: str = DOMAIN,
        root: Path | None = None,
    ) -> None:
        self.plane = plane
        self.binary = Path(binary)
        self.address = address
        self.domain = domain
        self.root = Path(tempfile.mkdtemp(prefix="coredns-", dir=root or plane.root))
        self._procs = Processes(self.root / "logs")

    def start(self) -> ClusterDNS:
        try:
            kubeconfig = self._identity()
            ready_port = free_port()
            corefile = self.root / "Corefile"
            # The cluster's zones from the API; every other name NXDOMAIN at once, from here:
            # no `forward`, nothing is looked up outside this machine (Ray asks for cloud
            # metadata hosts, which must fail fast, not time out).
            corefile.write_text(
                f"""{self.domain}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {self.address}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {self.domain} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
}}
.:53 {{
    bind {self.address}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""
            )
            self._procs.launch("coredns", [str(self.binary), "-conf", str(corefile)])
            self._procs.wait("coredns", lambda: http_ok(f"http://127.0.0.1:{ready_port}/ready"), 60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._procs.end("coredns")

    def __enter__(self) -> ClusterDNS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        return self._procs.log_tail("coredns", lines)

    def _identity(self) -> Path:
        return self.plane.cluster_role_kubeconfig(NAMESPACE, ACCOUNT, CLUSTER_ROLE, self.root / "kubeconfig")
