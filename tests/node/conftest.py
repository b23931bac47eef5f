"""A real cluster for the Pod tests: a control plane of their own, real nodes with cluster DNS,
KubeRay's own operator, and the project's images on the nodes.

``control_plane``: for ``tests/node`` a control plane of its own (not the session's shared one,
where the API-level tests run the KubeRay stand-in: two KubeRays must never reconcile one
RayCluster), with KubeRay's CRDs from its pinned module. ``kuberay_operator``: KubeRay's operator
(built from its Go module, ``make kuberay``) watching every namespace of it.
``pod_network``/``cluster_network``: the pod network (``testing.cluster_network``), claimed first so
that the API server listens on its gateway, with CoreDNS and kube-proxy: Services route and their
names resolve, so Pods (the chart's operator) reach the API server through the ``kubernetes``
Service as in any cluster. ``node``: the kubelet, containerd and the scheduler
(``rltrainer_operator.testing.node``) on it; its containerd keeps its images in
``~/.cache/rltrainer-node`` so that an image imported once stays imported. ``gpu_node``: a
second kubelet on the same pod network (``local_stack.two_nodes``' GPU node: one
``nvidia.com/gpu`` advertised, tainted for it), started only by the tests that need two nodes.
``kueue``: Kueue's own controller (``make kueue``) with its webhooks, for the shared-cluster
tests. ``images``: ``make images`` (podman, the local Debian base; cached layers make a rebuild take
seconds) and both images imported into the node; ``gpu_images``: the trainer image on the GPU
node too.
Everything here skips, naming what to install, where the node's packages or binaries are missing.
All tests under ``tests/node`` run in one pytest-xdist worker (``tests/conftest.py``): one node.
Package-scoped, not session-scoped: the worker stops all of it once its last Pod test is done
instead of keeping two idle nodes and their control plane (0.12 of a core) through the library's
tests that follow on it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from rltrainer_operator.testing import local_stack
from rltrainer_operator.testing.cluster_network import ClusterNetwork
from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from rltrainer_operator.testing.kuberay import KubeRayOperator
from rltrainer_operator.testing.kueue import KueueController
from rltrainer_operator.testing.node import Node, find_node_assets, import_images, missing_node_requirements
from tests.conftest import RLX_CRD, built_part, kuberay_crd_files

ROOT = Path(__file__).resolve().parents[2]
IMAGE_STORE = Path.home() / ".cache" / "rltrainer-node" / "containerd"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
OPERATOR_IMAGE = f"ghcr.io/rltrainer/operator:{VERSION}"
TRAINER_IMAGE = f"ghcr.io/rltrainer/trainer:{VERSION}-cpu"


@dataclass
class Images:
    operator: str
    trainer: str
    build_seconds: float
    import_seconds: float


#: The first node test also builds and imports the images (a cold build takes ~10 minutes).
NODE_TEST_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Node tests get the time the package fixtures may take in them (``make images``, importing
    into a cold image store); each still waits on its own deadlines. (Those marked ``e2e_only``
    are skipped by tests/conftest.py before their fixtures start a platform: an S3 server, the
    operator, about 25 s each to set up and tear down.)"""
    for item in items:
        if item.nodeid.startswith("tests/node/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT_S))


@pytest.fixture(scope="package")
def pod_network(tmp_path_factory):
    """The cluster's pod network, claimed before its control plane: the API server listens on
    its gateway, where Pods reach it through the ``kubernetes`` Service."""
    missing = missing_node_requirements()
    if missing:
        pytest.skip(missing)
    with ClusterNetwork(tmp_path_factory.mktemp("network")) as network:
        yield network


@pytest.fixture(scope="package")
def control_plane(pod_network):
    assets = find_assets()
    if assets is None:
        pytest.skip(MISSING_ASSETS)
    crds = kuberay_crd_files()
    with ControlPlane(assets, address=pod_network.gateway) as plane:
        plane.install_crds(*crds, RLX_CRD)
        yield plane


@pytest.fixture(scope="package")
def cluster_network(control_plane, pod_network):
    """The pod network with its add-ons: CoreDNS (``make coredns``) and kube-proxy, unless another
    test session on this machine runs kube-proxy (``service_proxy`` False then)."""
    built_part("coredns")
    return local_stack.cluster_network(control_plane, pod_network)


@pytest.fixture(scope="package")
def kuberay_operator(control_plane):
    """KubeRay's own operator for the Pod tests' control plane (every namespace)."""
    with KubeRayOperator(control_plane, built_part("kuberay")) as started:
        yield started


@pytest.fixture(scope="package")
def kueue(control_plane):
    """Kueue (``make kueue``) with its RayCluster integration, for the rest of the Pod tests once a
    test asks for it (it acts only on RayClusters labelled for one of its queues)."""
    with KueueController(control_plane, built_part("kueue")) as started:
        yield started


@pytest.fixture(scope="package")
def node(control_plane, cluster_network):
    with Node(control_plane, find_node_assets(), image_store=IMAGE_STORE, network=cluster_network) as started:
        if cluster_network.service_proxy:
            cluster_network.wait_for_service_proxy()
        print(f"node {started.name} Ready in {started.start_seconds:.1f} s")
        yield started


@pytest.fixture(scope="package")
def gpu_node(control_plane, node):
    assets, store = find_node_assets(), IMAGE_STORE.with_name("containerd-gpu")
    with local_stack.gpu_node(control_plane, assets, node, store) as started:
        print(f"node {started.name} Ready in {started.start_seconds:.1f} s")
        yield started


@pytest.fixture(scope="package")
def image_archives(tmp_path_factory) -> Path:
    """Images saved from podman for the Pod tests (one save for both nodes), removed after them."""
    folder = tmp_path_factory.mktemp("image-archives")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="package")
def gpu_images(gpu_node, images, image_archives) -> Images:
    started = time.monotonic()
    import_images([gpu_node], [images.trainer], archives=image_archives)
    print(f"trainer image into the GPU node: {time.monotonic() - started:.0f} s")
    return images


@pytest.fixture(scope="package")
def images(node, image_archives) -> Images:
    if shutil.which("mmdebstrap") is None:
        pytest.skip("no mmdebstrap for the images' local base: `make system-deps` as root")
    started = time.monotonic()
    built = subprocess.run(["make", "-s", "images"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if built.returncode != 0:
        pytest.fail(f"make images failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    build_seconds = time.monotonic() - started
    import_images([node], [OPERATOR_IMAGE, TRAINER_IMAGE], archives=image_archives)
    import_seconds = time.monotonic() - started - build_seconds
    print(f"make images: {build_seconds:.0f} s; import into the node: {import_seconds:.0f} s")
    return Images(OPERATOR_IMAGE, TRAINER_IMAGE, build_seconds, import_seconds)


@pytest.fixture
def pod_platform(monkeypatch, control_plane, node, gpu_node, gpu_images, kuberay_operator):
    """The operator on both nodes with an S3 server of its own, for one test
    (``test_platform_on_pods.platform_on_pods``)."""
    from tests.node.test_platform_on_pods import platform_on_pods

    with platform_on_pods(
        monkeypatch, control_plane, [node, gpu_node], kuberay_operator, gpu_images.trainer
    ) as platform:
        yield platform
