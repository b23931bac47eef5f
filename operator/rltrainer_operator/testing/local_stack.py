"""The whole platform on one machine: a real Kubernetes control plane, KubeRay and a real S3 server.

``LocalStack`` starts, on 127.0.0.1, a real control plane (``envtest.ControlPlane``: etcd,
kube-apiserver, kube-controller-manager) with the RLExperiment CRD and KubeRay's CRDs (those of
the KubeRay module ``parts.toml`` pins) installed as users install them (``kubectl apply
--server-side``), KubeRay against it, and optionally a real S3 server (SeaweedFS, built by
``make seaweedfs``: ``testing.s3_server``) with a bucket and identities of their own: the
operator's (read), the pods' (``trainer``: read and write), one that may only read and one with
no rights. It writes an
admin kubeconfig, so the operator (``kopf run ... -m rltrainer_operator``), ``kubectl`` and any
Kubernetes client connect as to a cluster. Two ways to run Ray's "pods":

- real Pods (``nodes``, or ``up --node``): two real nodes (``testing.node``: a CPU node, and a GPU
  node that advertises one ``nvidia.com/gpu`` and is tainted for it) with cluster DNS (CoreDNS),
  and **KubeRay's own operator** (``testing.kuberay``, built from its Go module) creating the Pods
  and Services; the kubelets run them from the trainer image. S3 then listens on the nodes'
  pod-network gateway, an address of this machine that Pods reach. With ``kueue=True`` (``up
  --node`` when ``make kueue`` has built it) **Kueue** runs too (``testing.kueue``), with no
  queues yet: the shared-clusters page shows the ones to create.
- processes (no root, no node): ``LocalKubeRay``, a stand-in for KubeRay that starts ``ray start``
  processes on this machine (its docstring says what it plays and how it differs).

The command line runs it until interrupted::

    python -m rltrainer_operator.testing.local_stack up --kubeconfig /tmp/rlx/kubeconfig \\
        --s3-bucket rl-checkpoints --env-file /tmp/rlx/env [--node]

The env file holds ``KUBECONFIG``, ``PATH`` with the control plane's ``kubectl`` first, the S3
endpoint with the operator's credentials (``AWS_*``: read only, for the operator and the shell's
``rltrainer`` commands) and the pods' (``S3_TRAINER_ACCESS_KEY_ID``, ``S3_TRAINER_SECRET_ACCESS_KEY``:
for the experiments' Secret), to ``source``. ``kill`` crashes a Ray pod (a container on a
node, or a local process group).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import kubernetes

from rltrainer_operator.testing import parts
from rltrainer_operator.testing.cluster_network import ClusterNetwork
from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from rltrainer_operator.testing.kuberay import KubeRayOperator
from rltrainer_operator.testing.kuberay import install_crds as install_kuberay_crds
from rltrainer_operator.testing.kueue import KueueController
from rltrainer_operator.testing.local_kuberay import LocalKubeRay
from rltrainer_operator.testing.ray_pods import RayPods
from rltrainer_operator.testing.s3_server import REGION, S3Server

REPO = Path(__file__).resolve().parents[3]
RLX_CRD = REPO / "crds" / "rltrainer.io_rlexperiments.yaml"
#: The env file's list of nodes (``name=containerd socket,...``) that ``kill`` reaches containers by.
NODES_VARIABLE = "RLTRAINER_LOCAL_NODES"
#: Where ``up --node`` keeps each node's imported images between runs (the tests' folder too).
NODE_IMAGE_STORE = Path.home() / ".cache" / "rltrainer-node"
#: The GPU node of a two-node stack: its name (a loopback address: the API server reaches its
#: kubelet there), labels (NVIDIA's GPU feature discovery's) and taint (as GPU node pools have).
GPU_NODE = "127.0.0.2"
GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true"}
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"

logger = logging.getLogger(__name__)


def install_crds(plane: ControlPlane) -> None:
    """KubeRay's CRDs (its module's own) and the RLExperiment CRD, as users install them."""
    install_kuberay_crds(plane)
    plane.install_crds(RLX_CRD)


def cluster_network(plane: ControlPlane, network: ClusterNetwork) -> ClusterNetwork:
    """``network``'s add-ons for ``plane``: CoreDNS (``make parts``) and kube-proxy (the node
    binaries'), unless another test session on this machine runs kube-proxy (then without)."""
    from rltrainer_operator.testing.node import KUBE_PROXY, find_node_assets

    network.start_dns(plane, parts.build("coredns"))
    if not network.start_service_proxy(plane, find_node_assets() / KUBE_PROXY, "localhost"):
        logger.warning("another test cluster on this machine runs kube-proxy: Services are not routed here")
    return network


def two_nodes(
    plane: ControlPlane, image_store: Path | None = None, network: ClusterNetwork | None = None
) -> list[Any]:
    """A CPU node (with the scheduler) and a GPU node (``GPU_NODE``: one ``nvidia.com/gpu``
    advertised, GPU feature discovery's label, the GPU taint) on ``network`` (with its add-ons;
    None: one of the CPU node's own, with cluster DNS), started on ``plane``. ``image_store``: a
    folder under which each node keeps its images between runs."""
    from rltrainer_operator.testing.node import Node, find_node_assets, missing_node_requirements

    missing = missing_node_requirements()
    if missing:
        raise RuntimeError(missing)
    assets = find_node_assets()
    stores = (
        (None, None) if image_store is None else (image_store / "containerd", image_store / "containerd-gpu")
    )
    dns = None if network is not None else parts.build("coredns")
    cpu = Node(plane, assets, image_store=stores[0], network=network, cluster_dns=dns).start()
    try:
        gpu = gpu_node(plane, assets, cpu, stores[1]).start()
    except BaseException:
        cpu.stop()
        raise
    return [cpu, gpu]


def gpu_node(plane: ControlPlane, assets: Path, cpu: Any, image_store: Path | None) -> Any:
    """The GPU node (not started): ``GPU_NODE``, one ``nvidia.com/gpu`` advertised, GPU feature
    discovery's label and the GPU taint, on ``cpu``'s pod network."""
    from rltrainer_operator.testing.node import Node

    return Node(
        plane,
        assets,
        name=GPU_NODE,
        address=GPU_NODE,
        scheduler=False,
        capacity={"nvidia.com/gpu": "1"},
        labels=GPU_NODE_LABELS,
        taints=[GPU_TAINT],
        image_store=image_store,
        network=cpu,
    )


class LocalStack:
    """Control plane + KubeRay (+ a real S3 server when ``s3_bucket`` is given); a context manager.

    Attributes once started: ``plane`` (the ``ControlPlane``: ``kubeconfig``, ``kubectl_run``),
    ``api_client`` (an admin kubernetes ``ApiClient``), ``kuberay`` (on nodes ``RayPods``, the
    test's hands on real KubeRay's Pods; else the ``LocalKubeRay`` stand-in), ``kuberay_operator``
    (real KubeRay's process, on nodes), ``nodes``, ``s3_endpoint`` (or None), ``s3`` (the
    ``S3Server``: ``s3.identity(name)`` for its identities' keys).

    ``plane``: a started control plane to use (with the CRDs installed) instead of a new one;
    ``nodes``: started nodes of that plane to run Ray's Pods on (the first one's pod network is
    where S3 listens); ``start_nodes``: start two nodes here (``two_nodes``) and import the
    images (``images``, built by ``make images``; ``image_store``: where the nodes keep them between
    runs); ``kuberay_operator``: a running ``KubeRayOperator`` of that plane (else, on nodes, one
    is started here). What the stack did not start, it does not stop.
    ``kuberay_options`` go to ``LocalKubeRay``.
    """

    def __init__(
        self,
        s3_bucket: str | None = None,
        *,
        plane: ControlPlane | None = None,
        nodes: list[Any] | None = None,
        start_nodes: bool = False,
        images: list[str] | None = None,
        image_store: Path | None = None,
        kuberay_operator: KubeRayOperator | None = None,
        kueue: KueueController | bool = False,
        **kuberay_options: Any,
    ) -> None:
        self.s3_bucket = s3_bucket
        self.kuberay_options = kuberay_options
        self.plane: ControlPlane | None = plane
        self._own_plane = plane is None
        self.nodes: list[Any] = list(nodes or [])
        self._start_nodes = start_nodes
        self._own_nodes: list[Any] = []
        self.images = list(images or [])
        self.image_store = image_store
        self.api_client: kubernetes.client.ApiClient | None = None
        self.kuberay: LocalKubeRay | RayPods | None = None
        self.kuberay_operator = kuberay_operator
        self._own_kuberay_operator = kuberay_operator is None
        self.kueue: KueueController | None = kueue if isinstance(kueue, KueueController) else None
        self._start_kueue = kueue is True
        self.network: ClusterNetwork | None = None
        self.s3: S3Server | None = None

    @property
    def on_nodes(self) -> bool:
        return bool(self.nodes) or self._start_nodes

    def start(self) -> LocalStack:
        try:
            if self.plane is None:
                assets = find_assets()
                if assets is None:
                    raise RuntimeError(MISSING_ASSETS)
                if self._start_nodes:  # the API server on the pod network: Pods reach it
                    self.network = ClusterNetwork(Path(tempfile.mkdtemp(prefix="network-"))).open()
                address = self.network.gateway if self.network else "127.0.0.1"
                self.plane = ControlPlane(assets, address=address).start()
                install_crds(self.plane)
            if self._start_nodes:
                if self.network is not None:
                    cluster_network(self.plane, self.network)
                self._own_nodes = two_nodes(self.plane, self.image_store, self.network)
                self.nodes = list(self._own_nodes)
                if self.network is not None and self.network.service_proxy:
                    self.network.wait_for_service_proxy()
            if self.nodes and self.images:
                from rltrainer_operator.testing.node import import_images

                import_images(self.nodes, self.images)
            if self.s3_bucket:
                self._start_s3(self.nodes[0].gateway if self.nodes else "127.0.0.1")
            self.api_client = kubernetes.config.new_client_from_config(config_file=str(self.plane.kubeconfig))
            if self.nodes:
                if self.kuberay_operator is None:
                    self.kuberay_operator = KubeRayOperator(self.plane).start()
                self.kuberay = RayPods(self.api_client, self.nodes, self.kuberay_operator)
                if self._start_kueue:
                    self.kueue = KueueController(self.plane).start()
            else:
                self.kuberay = LocalKubeRay(self.api_client, **self.kuberay_options).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_s3(self, host: str) -> None:
        binary = parts.find("seaweedfs")
        if binary is None:
            raise RuntimeError("the S3 server is not built: `make seaweedfs` (Go and the module proxy)")
        root = Path(tempfile.mkdtemp(prefix="s3-"))
        self.s3 = S3Server(binary, root, host=host, buckets=[self.s3_bucket])
        self.s3.start()

    @property
    def s3_endpoint(self) -> str | None:
        return self.s3.endpoint if self.s3 is not None else None

    def s3_credentials(self, identity: str = "trainer") -> dict[str, str]:
        """``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` of one of the S3 server's identities:
        ``operator`` (read), ``trainer`` (the pods': read and write), ``reader``, ``nobody``, ``admin``."""
        return self.s3.identity(identity).env()

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def env(self) -> dict[str, str]:
        """Variables for a shell (or the operator): kubectl on PATH, and this stack's S3 with the
        operator's credentials (read only), the pods' in ``S3_TRAINER_*`` for their Secret."""
        variables = {"PATH": f"{self.plane.assets}{os.pathsep}{os.environ.get('PATH', '')}"}
        if self.s3 is not None:
            trainer = self.s3.identity("trainer")
            variables.update(
                AWS_ENDPOINT_URL=self.s3.endpoint,
                AWS_DEFAULT_REGION=REGION,
                **self.s3_credentials("operator"),
                S3_TRAINER_ACCESS_KEY_ID=trainer.access_key,
                S3_TRAINER_SECRET_ACCESS_KEY=trainer.secret_key,
            )
        if self.on_nodes:  # for `kill`: each node's containerd
            variables[NODES_VARIABLE] = ",".join(f"{n.name}={n.socket}" for n in self.nodes)
        return variables

    def write_kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.plane.kubeconfig, path)
        path.chmod(0o600)
        return path

    def stop(self) -> None:
        if self.kueue is not None and self._start_kueue:
            self.kueue.stop()
        if isinstance(self.kuberay, LocalKubeRay):
            self.kuberay.close()
        if self.kuberay_operator is not None and self._own_kuberay_operator:
            self.kuberay_operator.stop()
        if self.api_client is not None:
            self.api_client.close()
        for node in reversed(self._own_nodes):  # a node joining another's network stops first
            node.stop()
        if self.network is not None:  # its add-ons, kube-proxy's rules, the bridge, the lock
            self.network.close()
            shutil.rmtree(self.network.root, ignore_errors=True)
        if self.plane is not None and self._own_plane:
            self.plane.stop()
        if self.s3 is not None:
            self.s3.remove()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rltrainer_operator.testing.local_stack",
        description="The platform on one machine: a real Kubernetes control plane, KubeRay, S3 (SeaweedFS).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run the control plane, KubeRay and S3 until interrupted")
    up.add_argument("--kubeconfig", required=True, help="write the admin kubeconfig here")
    up.add_argument(
        "--s3-bucket", help="also serve S3 (SeaweedFS, `make seaweedfs`) with this bucket and its identities"
    )
    up.add_argument(
        "--env-file", help="write KUBECONFIG, PATH (kubectl) and the S3 variables here, to source"
    )
    up.add_argument(
        "--node",
        action="store_true",
        help="run Ray's pods as real Pods on two real nodes (a CPU node, a GPU node without devices) "
        "created by KubeRay's own operator from the trainer image (`make images` and `make parts` "
        "first; needs root and `make system-deps`); without them, falls back to local Ray processes "
        "(the KubeRay stand-in)",
    )
    up.add_argument("--advertise-gpus", action="store_true", help="advertise num-gpus as given")
    up.add_argument("--keep-files", action="store_true", help="keep Ray's logs after clusters go")
    up.add_argument("-v", "--verbose", action="store_true")
    kill = commands.add_parser("kill", help="SIGKILL a local Ray pod (a crash), found by its name prefix")
    kill.add_argument("pod", help="a pod name or prefix, e.g. rlx-ppo-cartpole-rollouts-worker or rlx-x-head")
    kill.add_argument("-n", "--namespace", default="default")
    args = parser.parse_args(argv)
    return {"up": _up, "kill": _kill}[args.command](args)


def _up(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("rltrainer_operator.testing").setLevel(logging.INFO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    options: dict[str, Any] = {"advertise_gpus": args.advertise_gpus, "keep_files": args.keep_files}
    if args.node:
        options = _node_options()
    try:
        stack = LocalStack(s3_bucket=args.s3_bucket, **options).start()
    except RuntimeError as err:
        raise SystemExit(f"local_stack: {err}") from None
    try:
        config = stack.write_kubeconfig(args.kubeconfig)
        variables = {"KUBECONFIG": str(config.resolve()), **stack.env()}
        if args.env_file:
            Path(args.env_file).write_text(
                "".join(f"export {key}={shlex.quote(value)}\n" for key, value in variables.items())
            )
        print(
            f"Kubernetes API: {stack.plane.url} (kubeconfig {config}, kubectl {stack.plane.kubectl})",
            flush=True,
        )
        if stack.s3_endpoint:
            print(f"S3: {stack.s3_endpoint} (bucket {args.s3_bucket})", flush=True)
        if stack.on_nodes:
            names = ", ".join(f"{n.name} (pods {n.pod_cidr} via {n.bridge})" for n in stack.nodes)
            print(f"nodes: {names}; trainer image {stack.images[0]}", flush=True)
            print(
                f"KubeRay {parts.part('kuberay').version} (logs {stack.kuberay_operator.root / 'logs'}); "
                f"cluster DNS {stack.nodes[0].dns.address}",
                flush=True,
            )
            if stack.kueue is not None:
                print(f"Kueue {parts.part('kueue').version} (logs {stack.kueue.root / 'logs'})", flush=True)
        else:
            print(f"local KubeRay files: {stack.kuberay.root}", flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        stop.wait()
        print("stopping: deleting every local Ray cluster, then the control plane", flush=True)
    finally:
        stack.stop()
    return 0


def trainer_image() -> str:
    """The trainer image ``make images`` builds for this version (the Helm chart's default tag)."""
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return f"ghcr.io/rltrainer/trainer:{version}-cpu"


def _node_options() -> dict[str, Any]:
    """``LocalStack`` options for ``up --node``, or the process stand-in's (with the reason said)
    where this machine cannot run a node."""
    from rltrainer_operator.testing.node import image_id_of, missing_node_requirements

    missing = missing_node_requirements()
    if missing is None:
        try:
            image_id_of(trainer_image())
        except Exception:  # noqa: BLE001 - podman says why in its own words; ours is enough
            missing = f"no image {trainer_image()} in podman: run `make images` first"
    if missing is None and (absent := [name for name in ("kuberay", "coredns") if parts.find(name) is None]):
        missing = f"{' and '.join(absent)} not built: run `make parts` first"
    if missing is not None:
        print(f"local_stack: {missing}; running Ray's pods as local processes instead", flush=True)
        return {}
    options = {"start_nodes": True, "images": [trainer_image()], "image_store": NODE_IMAGE_STORE}
    if parts.find("kueue") is not None:
        options["kueue"] = True
    else:
        print("local_stack: Kueue is not built (`make kueue`): running without queues", flush=True)
    return options


def _kill(args: argparse.Namespace) -> int:
    """SIGKILL every process of the local pod whose name starts with ``args.pod``; on nodes
    (``NODES_VARIABLE`` set, as ``up --node``'s env file does), its Ray container's first process."""
    if os.environ.get(NODES_VARIABLE):
        return _kill_container(args)
    from rltrainer_operator.testing.local_kuberay import _marked_processes, kill_pod

    markers = sorted(
        {
            marker
            for _pid, marker in _marked_processes()
            if marker.split("/")[1] == args.namespace and marker.split("/")[-1].startswith(args.pod)
        }
    )
    if not markers:
        print(f"no local pod named {args.pod}* in namespace {args.namespace}")
        return 1
    pids = kill_pod(markers[0])
    print(f"killed pod {markers[0].split('/')[-1]} ({len(pids)} processes)")
    return 0


def _kill_container(args: argparse.Namespace) -> int:
    from rltrainer_operator.testing.node import kill_container
    from rltrainer_operator.testing.ray_pods import running_container

    sockets = dict(item.split("=", 1) for item in os.environ[NODES_VARIABLE].split(","))
    client = kubernetes.config.new_client_from_config()  # KUBECONFIG, from the env file
    with client:
        pods = kubernetes.client.CoreV1Api(client).list_namespaced_pod(args.namespace).items
    found = sorted((p for p in pods if p.metadata.name.startswith(args.pod)), key=lambda p: p.metadata.name)
    running = [(p, c) for p in found if p.spec.node_name in sockets and (c := running_container(p))]
    if not running:
        print(f"no running pod named {args.pod}* in namespace {args.namespace}")
        return 1
    pod, container = running[0]
    kill_container(sockets[pod.spec.node_name], container.container_id)
    print(f"killed container {container.name} of pod {pod.metadata.name} on node {pod.spec.node_name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
