"""The network a test cluster's nodes share: a pod network, cluster DNS and Services routed.

``ClusterNetwork`` claims a /24 of 10.244.0.0/16 (a lock file per /24, so concurrent test sessions
never share one) on a bridge of its own whose gateway address exists before any Pod, so servers
that Pods reach bind it first (the API server, S3, CoreDNS). Nodes (``testing.node``) join it,
each handing out its own part of the /24 (``take_slot``), so Pods on every node reach each other
directly, as on a cluster's flat pod network. Its add-ons, what a cluster's network has:

- ``start_dns``: CoreDNS (``testing.cluster_dns``) on the gateway, the kubelets' ``clusterDNS``;
- ``start_service_proxy``: the real kube-proxy (v1.32, ``NODE_ASSETS``) in iptables mode, so
  Services' cluster IPs lead to their Pods from Pods and from this machine: the ``kubernetes``
  Service to the API server, a metrics Service to its Pod. kube-proxy owns this machine's
  ``KUBE-*`` iptables chains, so one runs per machine (a lock file): a second test session on
  the same machine runs without it (``service_proxy`` False; what needs it skips, saying so). The
  Service range is routed onto the bridge, from Pods (their CNI routes) and from this machine,
  so an address in it never leaves the machine, programmed or not.

``close`` ends what it started, kube-proxy's rules too (``kube-proxy --cleanup``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from rltrainer_operator.testing.cluster_dns import ClusterDNS
from rltrainer_operator.testing.envtest import (
    SERVICE_CIDR,
    ControlPlane,
    ControlPlaneError,
    Processes,
    free_port,
    run_checked,
    try_lock,
)

#: Nodes that can share one pod network (its /24 split in as many address ranges).
POD_NETWORK_SLOTS = 4
#: Every Pod address of every test cluster on this machine (kube-proxy's --cluster-cidr).
CLUSTER_CIDR = "10.244.0.0/16"
#: Held by the session whose kube-proxy owns this machine's iptables Service rules.
SERVICE_PROXY_LOCK = Path("/tmp/rltrainer-kube-proxy.lock")


class ClusterNetwork:
    """A pod network on a bridge of this machine, and its add-ons; a context manager."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.pod_cidr = ""
        self.bridge = ""
        self.gateway = ""
        self.dns: ClusterDNS | None = None
        self.service_proxy = False
        self._slots = 0
        self._lock: Any = None
        self._proxy_lock: Any = None
        self._proxy_binary: Path | None = None
        self._procs = Processes(self.root / "logs")

    def open(self) -> ClusterNetwork:
        """Claim a /24 and make its bridge with the gateway address, which only this machine and
        the bridge's Pods may reach (the servers that bind it are the cluster's, not the LAN's)."""
        try:
            self._claim()
            # A bridge of this name outlived a killed run (we hold its lock now): start afresh.
            _quiet(["ip", "link", "delete", self.bridge])
            run_checked(["ip", "link", "add", "name", self.bridge, "type", "bridge"])
            run_checked(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            run_checked(["ip", "link", "set", self.bridge, "up"])
            for rule in self._gateway_rules():  # inserted in turn: the last one ends up first
                run_checked(["iptables", "-I", "INPUT", *rule])
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Everything ``open`` and the add-ons did, undone; each step whatever the others did."""
        try:
            self._procs.end("kube-proxy")
            if self._proxy_binary is not None:  # its chains and rules, as its own cleanup removes them
                _quiet([str(self._proxy_binary), "--cleanup"])
                for table in ("filter", "nat", "mangle"):  # the one chain its cleanup leaves
                    _quiet(["iptables", "-t", table, "-X", "KUBE-PROXY-CANARY"])
                self._proxy_binary = None
            if self.dns is not None:
                self.dns.stop()
                self.dns = None
        finally:
            if self.bridge:  # its addresses and routes go with it
                for rule in self._gateway_rules():
                    _quiet(["iptables", "-D", "INPUT", *rule])
                _quiet(["ip", "link", "delete", self.bridge])
            for lock in (self._proxy_lock, self._lock):
                if lock is not None:
                    lock.close()
            self._lock = self._proxy_lock = None
            self.service_proxy = False

    def _gateway_rules(self) -> list[list[str]]:
        """INPUT rules: the gateway is reached from this machine (``lo``, Service traffic that
        kube-proxy sent there included) and from the bridge's Pods, from nowhere else."""
        return [
            ["-d", self.gateway, "!", "-i", self.bridge, "-j", "DROP"],
            ["-d", self.gateway, "-i", "lo", "-j", "ACCEPT"],
        ]

    def __enter__(self) -> ClusterNetwork:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def take_slot(self) -> int:
        """The next node's part of the /24 (0 for the first)."""
        if self._slots >= POD_NETWORK_SLOTS:
            raise ControlPlaneError(f"at most {POD_NETWORK_SLOTS} nodes share one pod network")
        self._slots += 1
        return self._slots - 1

    def pod_routes(self) -> list[dict[str, str]]:
        """Routes Pods get beyond their bridge: the Service range, when Services are routed."""
        return [{"dst": SERVICE_CIDR}] if self.service_proxy else []

    def start_dns(self, plane: ControlPlane, coredns: Path) -> ClusterDNS:
        self.dns = ClusterDNS(plane, coredns, address=self.gateway, root=self.root).start()
        return self.dns

    def start_service_proxy(self, plane: ControlPlane, kube_proxy: Path, node_name: str) -> bool:
        """kube-proxy for ``plane``'s Services as node ``node_name``'s, unless another session's
        holds this machine's rules (then False). The Service range is routed onto the bridge
        first. It routes once that node is up: ``wait_for_service_proxy``."""
        self._proxy_lock = try_lock(SERVICE_PROXY_LOCK)
        if self._proxy_lock is None:
            return False
        # Never over a route this machine has (a LAN on the same range): then no Services here.
        if _quiet(["ip", "route", "add", SERVICE_CIDR, "dev", self.bridge]) != 0:
            self._proxy_lock.close()
            self._proxy_lock = None
            return False
        self._proxy_binary = kube_proxy
        self._procs.launch(
            "kube-proxy",
            [
                str(kube_proxy),
                f"--kubeconfig={plane.kubeconfig}",
                f"--hostname-override={node_name}",
                f"--bind-address={self.gateway}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={CLUSTER_CIDR}",
                # No br_netfilter on this bridge: replies must come back through this machine.
                "--masquerade-all",
                # The machine's conntrack settings stay as they are (0: leave alone).
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                # NodePorts only on the pod network, and never on loopback (which would need
                # route_localnet=1 on this machine).
                f"--nodeport-addresses={self.pod_cidr}",
                "--iptables-localhost-nodeports=false",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--healthz-bind-address=127.0.0.1:{free_port()}",
            ],
        )
        self.service_proxy = True
        return True

    def wait_for_service_proxy(self, timeout_s: float = 120.0) -> None:
        """Until kube-proxy routes the ``kubernetes`` Service. It starts syncing once its node's
        Node object exists (it retries reading it with a growing delay): call this after the
        first node is Ready."""
        self._procs.wait("kube-proxy", _routes_the_kubernetes_service, timeout_s)

    def log_tail(self, name: str, lines: int = 20) -> str:
        return self._procs.log_tail(name, lines)

    def _claim(self) -> None:
        routes = run_checked(["ip", "-o", "route"])
        for k in range(256):
            lock = try_lock(f"/tmp/rltrainer-node-net-{k}.lock")
            if lock is None:
                continue
            if f"10.244.{k}.0/24" in routes:
                lock.close()
                continue
            self._lock, self.pod_cidr, self.bridge = lock, f"10.244.{k}.0/24", f"rltnode{k}"
            self.gateway = f"10.244.{k}.1"
            return
        raise ControlPlaneError("no free pod network in 10.244.0.0/16")


def _routes_the_kubernetes_service() -> bool:
    """Whether kube-proxy has written the rule of the ``kubernetes`` Service (its first sync)."""
    rules = subprocess.run(
        ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], capture_output=True, text=True, check=False
    )
    return "default/kubernetes:https" in rules.stdout


def _quiet(args: list[str]) -> int:
    """Run a clean-up step; its exit status (a step that finds nothing to undo fails harmlessly)."""
    return subprocess.run(args, capture_output=True, timeout=60, check=False).returncode
