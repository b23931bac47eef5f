"""A real worker node for the test control plane: containerd + runc, the kubelet and the scheduler.

``ControlPlane`` (``envtest``) stores and reconciles objects; a ``Node`` runs them: the real kubelet
and kube-scheduler (Kubernetes v1.32, from ``NODE_ASSETS`` or ``../shared/envtest/node/setup``),
containerd and runc from Debian, and CNI bridge networking, so Pods run as containers on this
machine from images built here (nothing is pulled: images are imported with ``import_image``).

Each node has its own state folder, free 127.0.0.1 ports and its own pod network (a /24 of
10.244.0.0/16 on a bridge of its own, reserved with a lock file so that concurrent test sessions
never share one); ``stop()`` ends exactly what ``start()`` began: the kubelet, the scheduler, every
container and sandbox in its containerd, containerd, the network namespaces and mounts its pods
left, and the bridge. What the host must refuse is worked around as the node README says:
containerd never lowers ``oom_score_adj`` (``restrict_oom_score_adj``), and podman builds with
runc and no ulimits (``images/containers.conf``).

    with ControlPlane(assets) as plane, Node(plane, node_assets) as node:
        node.import_image("ghcr.io/rltrainer/operator:0.1.0")
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rltrainer_operator.testing.cluster_dns import ClusterDNS
from rltrainer_operator.testing.cluster_network import POD_NETWORK_SLOTS, ClusterNetwork
from rltrainer_operator.testing.envtest import (
    REPO,
    SHARED_ENVTEST,
    ControlPlane,
    ControlPlaneError,
    Processes,
    free_port,
    run_checked,
    try_lock,
)
from rltrainer_operator.testing.image_layers import LayerArchiveError, StoredImage

#: The Debian packages a node needs (tests/system-packages.txt lists them for `make system-deps`).
NODE_PACKAGES = "containerd runc containernetworking-plugins podman busybox-static iptables"
#: What must be on this machine, and the package that brings each.
NODE_TOOLS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "podman": "podman",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/bin/busybox": "busybox-static",
    "iptables": "iptables",
}
#: The sandbox ("pause") image containerd 1.6 asks for; made here from busybox (no registry).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: podman's settings for this kind of machine (runc, no ulimits raised).
CONTAINERS_CONF = REPO / "images" / "containers.conf"
NETNS_DIR = Path("/var/run/netns")
#: The node binaries (``NODE_ASSETS``) beside the kubelet and the scheduler.
KUBE_PROXY = "kube-proxy"
#: The ConfigMap MicroShift's API server adds to every service-account token volume.
SERVICE_CA_CONFIG_MAP = "openshift-service-ca.crt"


def find_node_assets() -> Path | None:
    """The folder with ``kubelet`` and ``kube-scheduler``, or None when there is none to be had."""
    configured = os.environ.get("NODE_ASSETS")
    if configured:
        folder = Path(configured)
        return folder if (folder / "kubelet").exists() and (folder / "kube-scheduler").exists() else None
    setup = SHARED_ENVTEST / "node" / "setup"
    if not setup.exists():
        return None
    done = subprocess.run([str(setup)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{setup} failed: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def missing_node_requirements() -> str | None:
    """One line naming what this machine lacks to run a node (None: nothing)."""
    if os.geteuid() != 0:
        return "a Kubernetes node needs root (containerd, runc, network namespaces)"
    missing = sorted({pkg for tool, pkg in NODE_TOOLS.items() if not _exists(tool)})
    if missing:
        return f"no Kubernetes node: missing Debian packages {' '.join(missing)} (`make system-deps` as root)"
    if find_node_assets() is None:
        return (
            "no kubelet/kube-scheduler: set NODE_ASSETS to a folder with both, "
            f"or provide {SHARED_ENVTEST / 'node'}"
        )
    return None


def scheduler_command(assets: Path, plane: ControlPlane) -> list[str]:
    """The real kube-scheduler (of ``assets``) for ``plane``, one per cluster: its default
    profile and client limits, health on a free 127.0.0.1 port, no leader election."""
    return [
        str(Path(assets) / "kube-scheduler"),
        f"--kubeconfig={plane.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        "--leader-elect=false",
    ]


def podman_env() -> dict[str, str]:
    """The environment podman runs with here (CONTAINERS_CONF as `make images` sets it)."""
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF))}


class Node:
    """One kubelet (with its containerd) registered with ``plane``, and the scheduler when
    ``scheduler`` is true (one per cluster); a context manager.

    ``name`` is the Node object's name, a name of ``address`` (the API server reaches the kubelet
    there, by the node's Hostname: a kubelet refuses a loopback InternalIP).
    ``capacity``: extended resources to advertise (``{"nvidia.com/gpu": "1"}``: the scheduler
    places GPU requests there; no device exists). ``labels`` and ``taints`` are the kubelet's
    ``--node-labels`` and ``--register-with-taints``. ``image_store``: a folder for containerd's
    content and snapshots that outlives the node (imported images stay imported), used only while
    this node holds its lock; None, or a store another node holds: one inside ``root``.
    ``network``: the ``ClusterNetwork`` this node joins (its Pods get their own part of the /24,
    so Pods on every node reach each other directly, as on a cluster's flat pod network, and the
    network's cluster DNS and Service routes), or another node whose network it joins; None: a
    network of the node's own, with CoreDNS as its cluster DNS when ``cluster_dns`` (the binary)
    is given and kube-proxy when ``service_proxy`` (the binary) is.
    """

    def __init__(
        self,
        plane: ControlPlane,
        assets: Path,
        *,
        name: str = "localhost",
        address: str = "127.0.0.1",
        scheduler: bool = True,
        capacity: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        taints: list[str] | None = None,
        root: Path | None = None,
        image_store: Path | None = None,
        network: Node | ClusterNetwork | None = None,
        cluster_dns: Path | None = None,
        service_proxy: Path | None = None,
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.plane = plane
        self.assets = Path(assets)
        self.name = name
        self.address = address
        self.with_scheduler = scheduler
        self.capacity = dict(capacity or {})
        self.labels = dict(labels or {})
        self.taints = list(taints or [])
        self.ready_timeout_s = ready_timeout_s
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix=f"node-{name}-") if root is None else root)
        self.socket = self.root / "containerd.sock"
        self._joins = network
        self.net: ClusterNetwork | None = None
        self._own_net = False
        self._coredns = None if cluster_dns is None else Path(cluster_dns)
        self._kube_proxy = None if service_proxy is None else Path(service_proxy)
        self._slot = 0  # which part of the /24 this node's Pods get (nodes sharing one network)
        self._procs = Processes(self.root / "logs", new_session=True)
        self._store_lock: Any = None
        self._publisher: threading.Thread | None = None
        self._stop_publisher = threading.Event()
        self._namespace_watch: subprocess.Popen | None = None
        self._netns_before: set[str] = set()
        self.image_store = self._take_store(image_store) or self.root / "containerd-root"

    # ---------------------------------------------------------------------------------- life cycle

    def start(self) -> Node:
        started = time.monotonic()
        try:
            (self.root / "logs").mkdir(parents=True, exist_ok=True)
            self._join_network()
            self._netns_before = _netns()
            self._start_containerd()
            self._ensure_pause_image()
            if self.with_scheduler:
                self._start_scheduler()
                self._start_service_ca_publisher()
            self._start_kubelet()
            self._wait_ready()
            if self._own_net and self.net.service_proxy:
                self.net.wait_for_service_proxy()
            if self.capacity:
                self._advertise(self.capacity)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Stop what ``start`` began, newest first; then the node's files (when it made them)."""
        if self._publisher is not None:
            self._stop_publisher.set()
            while self._publisher.is_alive():  # its watch may have been starting
                if self._namespace_watch is not None:
                    self._namespace_watch.terminate()
                self._publisher.join(0.5)
            self._publisher = None
        for name in ("kubelet", "kube-scheduler"):
            self._procs.end(name)
        if "containerd" in self._procs:
            self._remove_containers()
        self._procs.end("containerd")
        self._remove_leftovers()
        if self.net is not None and self._own_net:
            self.net.close()
        if self._store_lock is not None:
            self._store_lock.close()
        self._store_lock = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------- faults

    def restart_containerd(self) -> float:
        """containerd stopped (SIGTERM) and started again under the running Pods, as a runtime
        upgrade does: the containers' shims outlive it and it finds them again; the kubelet
        reconnects to its socket. Returns the seconds until containerd answered again."""
        started = time.monotonic()
        self._procs.end("containerd")
        self._launch_containerd()
        return time.monotonic() - started

    def stop_kubelet(self, *, containers: bool = False) -> None:
        """The kubelet stopped: the node stops reporting and goes ``NotReady`` once the node
        controller's grace period passes. ``containers``: its containers killed too, as when the
        machine itself is lost (without it they run on, unsupervised, as under a crashed kubelet)."""
        self._procs.end("kubelet")
        if containers:
            self._remove_containers()

    def start_kubelet(self) -> None:
        """The kubelet started again (after ``stop_kubelet``): it registers, reconciles its Pods
        with what the API server holds, and the node is ``Ready`` again."""
        self._start_kubelet()
        self._wait_ready()

    @contextlib.contextmanager
    def partition(self, namespace: str, pod: str, peer: str) -> Iterator[None]:
        """Every packet between the Pod and the address ``peer`` dropped for the block, in the
        Pod's own network namespace (its sandbox's: the rules outlive a restarted container), as a
        broken link or a network policy gone wrong does; nothing else of the machine is touched.
        Dropped, not refused: connections hang until their own timeouts, as across a real split."""
        netns = f"--net=/proc/{self.sandbox_pid(namespace, pod)}/ns/net"
        rules = [("INPUT", "-s"), ("OUTPUT", "-d")]
        for chain, side in rules:
            _run(["nsenter", netns, "iptables", "-w", "-I", chain, side, peer, "-j", "DROP"])
        try:
            yield
        finally:
            for chain, side in rules:
                _run(["nsenter", netns, "iptables", "-w", "-D", chain, side, peer, "-j", "DROP"])

    def sandbox_pid(self, namespace: str, pod: str) -> int:
        """The process of the Pod's sandbox (the pause container): it holds the Pod's namespaces."""
        pids = dict(line.split()[:2] for line in self.ctr("tasks", "ls").splitlines()[1:])
        for container in self.ctr("containers", "ls", "-q").split():
            labels = json.loads(self.ctr("containers", "info", container)).get("Labels") or {}
            if (
                labels.get("io.cri-containerd.kind") == "sandbox"
                and labels.get("io.kubernetes.pod.namespace") == namespace
                and labels.get("io.kubernetes.pod.name") == pod
                and container in pids
            ):
                return int(pids[container])
        raise ControlPlaneError(f"no running sandbox for Pod {namespace}/{pod} on node {self.name}")

    # -------------------------------------------------------------------------------------- images

    def import_image(self, ref: str, timeout_s: float = 600.0, archive: Path | None = None) -> None:
        """Copy ``ref`` from podman's storage into this node's containerd (its ``k8s.io``
        namespace, where the kubelet looks), unless the same image is there already.
        ``archive``: the image already saved by ``save_image`` (one save for several nodes)."""
        image_id = image_id_of(ref)
        marker = self._import_marker(ref)
        if marker.exists() and marker.read_text() == image_id and ref in self.images():
            return
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            if archive is None:
                archive = save_image(ref, Path(tmp), timeout_s)
            # A Docker archive names its image in RepoTags; ctr keeps the name.
            self.ctr("images", "import", str(archive), timeout=timeout_s)
        self._mark_imported(ref, image_id)

    def import_stored_image(
        self, ref: str, image_id: str, stored: StoredImage, timeout_s: float = 600.0
    ) -> None:
        """``ref`` (podman's image ``image_id``) into this node from an archive of the layers its
        containerd lacks (``image_layers``)."""
        present = set(self.ctr("content", "ls", "-q").split())
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            archive = Path(tmp) / "image.tar"
            stored.write_archive(archive, ref, present)
            self.ctr("images", "import", str(archive), timeout=timeout_s)
        self._mark_imported(ref, image_id)

    def has_image(self, ref: str) -> bool:
        """Whether ``ref``, as podman has it now, was imported here already."""
        marker = self._import_marker(ref)
        return marker.exists() and marker.read_text() == image_id_of(ref) and ref in self.images()

    def _mark_imported(self, ref: str, image_id: str) -> None:
        marker = self._import_marker(ref)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(image_id)

    def _import_marker(self, ref: str) -> Path:
        folder = self.image_store.parent / f"{self.image_store.name}.imported"
        return folder / ref.replace("/", "_").replace(":", "_")

    def kill_container(self, container_id: str, signal: str = "SIGKILL") -> None:
        kill_container(self.socket, container_id, signal)

    def images(self) -> list[str]:
        return self.ctr("images", "ls", "-q").split()

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """``ctr`` against this node's containerd, in the kubelet's ``k8s.io`` namespace."""
        return _run(["ctr", "--address", str(self.socket), "-n", "k8s.io", *args], timeout=timeout)

    # ------------------------------------------------------------------------------------ processes

    def log_tail(self, name: str, lines: int = 20) -> str:
        return self._procs.log_tail(name, lines)

    @property
    def pod_cidr(self) -> str:
        return self.net.pod_cidr if self.net else ""

    @property
    def bridge(self) -> str:
        return self.net.bridge if self.net else ""

    @property
    def gateway(self) -> str:
        """The pod network's gateway: an address of this machine that Pods reach (servers that
        Pods must reach, such as S3, bind it)."""
        return self.net.gateway if self.net else ""

    @property
    def dns(self) -> ClusterDNS | None:
        return self.net.dns if self.net else None

    def _join_network(self) -> None:
        """The network given (or that of the node given), else one of this node's own with the
        add-ons asked for; then this node's part of its /24."""
        if isinstance(self._joins, Node):
            if self._joins.net is None:
                raise ControlPlaneError(f"node {self._joins.name} has no pod network yet: start it first")
            self.net = self._joins.net
        elif isinstance(self._joins, ClusterNetwork):
            self.net = self._joins
        else:
            self.net, self._own_net = ClusterNetwork(self.root).open(), True
            if self._coredns is not None:
                self.net.start_dns(self.plane, self._coredns)
            if self._kube_proxy is not None:
                self.net.start_service_proxy(self.plane, self._kube_proxy, self.name)
        self._slot = self.net.take_slot()

    def _start_containerd(self) -> None:
        (self.root / "cni").mkdir(exist_ok=True)
        runc = shutil.which("runc")
        config = f"""version = 2
root = "{self.image_store}"
state = "{self.root}/containerd-state"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.root}/cni"
"""
        (self.root / "containerd.toml").write_text(config)
        network = {
            "cniVersion": "1.0.0",
            "name": f"rltrainer-{self.bridge}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,  # nothing is routed out of this machine
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr, **self._address_range()}]],
                        "dataDir": str(self.root / "cni-ipam"),
                        "routes": self.net.pod_routes(),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }
        (self.root / "cni" / "10-bridge.conflist").write_text(json.dumps(network))
        self._launch_containerd()
        self._remove_containers()  # a kept store may hold those of a run that was killed

    def _launch_containerd(self) -> None:
        self._procs.launch("containerd", ["containerd", "--config", str(self.root / "containerd.toml")])
        self._procs.wait("containerd", lambda: _ok(["ctr", "--address", str(self.socket), "version"]), 60)

    def _address_range(self) -> dict[str, str]:
        """This node's part of the shared /24: addresses ``.2``-``.63`` for the first node,
        ``.64``-``.127`` for the second, and so on (the gateway is ``.1``)."""
        base = self.pod_cidr.rsplit(".", 1)[0]
        size = 256 // POD_NETWORK_SLOTS
        first = max(2, self._slot * size)
        return {"rangeStart": f"{base}.{first}", "rangeEnd": f"{base}.{(self._slot + 1) * size - 1}"}

    def _take_store(self, store: Path | None) -> Path | None:
        if store is None:
            return None
        store.mkdir(parents=True, exist_ok=True)
        self._store_lock = try_lock(store.parent / f"{store.name}.lock")
        return store if self._store_lock is not None else None

    def _ensure_pause_image(self) -> None:
        """The sandbox image: busybox sleeping forever, tagged as the pause image containerd wants."""
        if PAUSE_IMAGE in self.images():
            return
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            rootfs = Path(tmp) / "root"
            (rootfs / "bin").mkdir(parents=True)
            shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
            for tool in ("sleep", "sh"):
                (rootfs / "bin" / tool).symlink_to("busybox")
            _run(["tar", "-C", str(rootfs), "-cf", f"{tmp}/root.tar", "."])
            env = podman_env()
            _run(
                [
                    "podman",
                    "import",
                    "-q",
                    "--change",
                    'CMD ["/bin/sleep","2147483647"]',
                    f"{tmp}/root.tar",
                    PAUSE_IMAGE,
                ],
                env=env,
            )
            _run(
                ["podman", "save", "-q", "--format", "oci-archive", "-o", f"{tmp}/pause.tar", PAUSE_IMAGE],
                env=env,
            )
            self.ctr("images", "import", "--base-name", PAUSE_IMAGE.rsplit(":", 1)[0], f"{tmp}/pause.tar")

    def _start_scheduler(self) -> None:
        self._procs.launch("kube-scheduler", scheduler_command(self.assets, self.plane))

    def _start_service_ca_publisher(self) -> None:
        """This API server is MicroShift's build: its ServiceAccount admission adds OpenShift's
        ``openshift-service-ca.crt`` ConfigMap to every Pod's token volume, and OpenShift's
        service-CA controller publishes that ConfigMap in each namespace. No such controller runs
        here, so this does its part (the cluster's CA under ``service-ca.crt``), as
        ``root-ca-cert-publisher`` does for ``kube-root-ca.crt``; without it no Pod that mounts a
        token starts."""
        ca = (self.plane.root / "pki" / "ca.crt").read_text()
        self._stop_publisher = threading.Event()
        watch_namespaces = self.plane.kubectl_argv("get", "namespaces", "-o", "name", "--watch")

        def publish() -> None:
            done: set[str] = set()
            while not self._stop_publisher.is_set():  # again when the API server ends the watch
                self._namespace_watch = subprocess.Popen(
                    watch_namespaces, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
                for line in self._namespace_watch.stdout:
                    namespace = line.strip().removeprefix("namespace/")
                    if namespace in done:
                        continue
                    config_map = {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": SERVICE_CA_CONFIG_MAP, "namespace": namespace},
                        "data": {"service-ca.crt": ca},
                    }
                    applied = self.plane.kubectl_run(
                        "apply", "-f", "-", stdin=json.dumps(config_map), check=False
                    )
                    if applied.returncode == 0:  # not when the namespace is being deleted
                        done.add(namespace)
                self._namespace_watch.wait()
                self._stop_publisher.wait(0.5)

        self._publisher = threading.Thread(target=publish, name="service-ca-publisher", daemon=True)
        self._publisher.start()

    def _start_kubelet(self) -> None:
        port, healthz = free_port(), free_port()
        self.kubelet_port, self._healthz = port, healthz
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.address,  # where the API server reaches it: the node's Hostname
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            # Its API answers on this machine's loopback only; the API server is its one client.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "staticPodPath": str(self.root / "static-pods"),
            "resolvConf": "/etc/resolv.conf",
            **self._dns_settings(),
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "localStorageCapacityIsolation": False,
        }
        (self.root / "static-pods").mkdir(exist_ok=True)
        (self.root / "kubelet.yaml").write_text(json.dumps(config))
        args = [
            str(self.assets / "kubelet"),
            f"--config={self.root / 'kubelet.yaml'}",
            f"--kubeconfig={self.plane.kubeconfig}",
            f"--root-dir={self.root / 'kubelet'}",
            f"--hostname-override={self.name}",
            "--v=1",
        ]
        if self.labels:
            args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()))
        if self.taints:
            args.append("--register-with-taints=" + ",".join(self.taints))
        self._procs.launch("kubelet", args)

    def _dns_settings(self) -> dict[str, Any]:
        """The kubelet's cluster DNS: its network's CoreDNS (Pods then resolve
        ``<service>.<namespace>.svc.cluster.local``)."""
        dns = self.dns
        return {} if dns is None else {"clusterDNS": [dns.address], "clusterDomain": dns.domain}

    def _wait_ready(self) -> None:
        def ready() -> bool:
            done = self.plane.kubectl_run(
                "get",
                "node",
                self.name,
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                check=False,
            )
            return done.stdout.strip() == "True"

        self._procs.wait("kubelet", ready, self.ready_timeout_s)

    def _advertise(self, capacity: dict[str, str]) -> None:
        """Extended resources in the node's status (what a device plugin would report). Both
        fields: the kubelet copies capacity to allocatable (what the scheduler reads) only at its
        next status update, up to 10 s later, and a Pod scheduled before then is refused once
        (a transient ``Unschedulable`` warning on the experiment)."""
        patch = {"status": {"capacity": capacity, "allocatable": capacity}}
        self.plane.kubectl_run(
            "patch", "node", self.name, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )

    # ------------------------------------------------------------------------------------- cleanup

    def _remove_containers(self) -> None:
        """Every task killed and every container deleted in this node's containerd."""
        for task in self._quiet_ctr("tasks", "ls", "-q"):
            self._quiet_ctr("tasks", "kill", "-s", "SIGKILL", task)
        deadline = time.monotonic() + 10
        while self._quiet_ctr("tasks", "ls", "-q") and time.monotonic() < deadline:
            for task in self._quiet_ctr("tasks", "ls", "-q"):
                self._quiet_ctr("tasks", "delete", "-f", task)
            time.sleep(0.2)
        for container in self._quiet_ctr("containers", "ls", "-q"):
            self._quiet_ctr("containers", "delete", container)

    def _quiet_ctr(self, *args: str) -> list[str]:
        done = subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.stdout.split() if done.returncode == 0 else []

    def _remove_leftovers(self) -> None:
        """The kubelet's volume mounts and the sandboxes' network namespaces."""
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{self.root}/")), reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        for name in _netns() - self._netns_before:
            if name.startswith("cni-"):
                subprocess.run(["umount", "-l", str(NETNS_DIR / name)], capture_output=True, check=False)
                (NETNS_DIR / name).unlink(missing_ok=True)


def kill_container(socket: Path | str, container_id: str, signal: str = "SIGKILL") -> None:
    """Send ``signal`` to a container's first process through its node's containerd at ``socket``
    (``containerd://ID`` as a Pod's status names it, or the bare ID): a crash, to the kubelet."""
    container = container_id.removeprefix("containerd://")
    _run(["ctr", "--address", str(socket), "-n", "k8s.io", "tasks", "kill", "-s", signal, container])


def image_id_of(ref: str) -> str:
    return _run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], env=podman_env()).strip()


def save_image(ref: str, folder: Path, timeout_s: float = 600.0) -> Path:
    """``ref`` from podman's storage as a Docker archive in ``folder``: its layers uncompressed
    (an OCI archive gzips every layer, which for the trainer's 6 GB took 2-3 times as long)."""
    archive = folder / (ref.replace("/", "_").replace(":", "_") + ".tar")
    _run(
        ["podman", "save", "-q", "--format", "docker-archive", "-o", str(archive), ref],
        env=podman_env(),
        timeout=timeout_s,
    )
    return archive


def import_images(
    nodes: list[Node], refs: list[str], timeout_s: float = 600.0, archives: Path | None = None
) -> None:
    """Every image of ``refs`` into every node that lacks it. Each node gets an archive of only
    the layers its containerd lacks (``image_layers``: after a change to the sources, the few MB
    of the top layers, not the trainer's 6 GB); where podman's storage cannot be read that way,
    the whole image is saved from podman once for all nodes. ``archives``: a folder where such
    whole saved images stay (by image id) for later calls to reuse."""
    for ref in refs:
        lacking = [node for node in nodes if not node.has_image(ref)]
        if not lacking:
            continue
        image_id = image_id_of(ref)
        try:
            stored = StoredImage.read(podman_storage_root(), image_id)
        except LayerArchiveError as why:
            print(f"{ref}: the whole image is saved for the nodes ({why})")
        else:
            for node in lacking:
                node.import_stored_image(ref, image_id, stored, timeout_s)
            continue
        with tempfile.TemporaryDirectory(dir=lacking[0].root) as tmp:
            folder = Path(tmp) if archives is None else archives / image_id
            folder.mkdir(parents=True, exist_ok=True)
            archive = next(folder.glob("*.tar"), None) or save_image(ref, folder, timeout_s)
            for node in lacking:
                node.import_image(ref, timeout_s, archive=archive)


@functools.cache
def podman_storage_root() -> Path:
    """podman's image storage (its overlay driver's graph root); ``LayerArchiveError``
    for another driver."""
    found = _run(
        ["podman", "info", "--format", "{{.Store.GraphDriverName}} {{.Store.GraphRoot}}"], env=podman_env()
    ).split(maxsplit=1)
    if len(found) != 2 or found[0] != "overlay":
        raise LayerArchiveError(f"podman's storage driver is {found[0] if found else 'unknown'}, not overlay")
    return Path(found[1].strip())


def _exists(tool: str) -> bool:
    return os.access(tool, os.X_OK) if tool.startswith("/") else shutil.which(tool) is not None


def _netns() -> set[str]:
    try:
        return {entry.name for entry in NETNS_DIR.iterdir()}
    except OSError:
        return set()


def _ok(args: list[str]) -> bool:
    return subprocess.run(args, capture_output=True, timeout=10, check=False).returncode == 0


def _run(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120.0) -> str:
    return run_checked(args, env=env, timeout=timeout)
