"""A real node for the control plane, and the project's images on it.

``node``: the kubelet, containerd and the scheduler (``rltrainer_operator.testing.node``) joined to
the session's ``control_plane``; its containerd keeps its images in ``~/.cache/rltrainer-node`` so
that an image imported once stays imported. ``gpu_node``: a second kubelet on the same pod network
(``local_stack.two_nodes``' GPU node: one ``nvidia.com/gpu`` advertised, tainted for it), started
only by the tests that need two nodes. ``images``: ``make images`` (podman, the local Debian
base; cached layers make a rebuild take seconds) and both images imported into the node;
``gpu_images``: the trainer image on the GPU node too.
Everything here skips, naming what to install, where the node's packages or binaries are missing.
All tests under ``tests/node`` run in one pytest-xdist worker (``tests/conftest.py``): one node.
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
from rltrainer_operator.testing.node import Node, find_node_assets, import_images, missing_node_requirements

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
    """Node tests get the time the session fixtures may take in them (``make images``, importing
    into a cold image store); each still waits on its own deadlines."""
    for item in items:
        if item.nodeid.startswith("tests/node/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def node(control_plane):
    missing = missing_node_requirements()
    if missing:
        pytest.skip(missing)
    with Node(control_plane, find_node_assets(), image_store=IMAGE_STORE) as started:
        print(f"node {started.name} Ready in {started.start_seconds:.1f} s")
        yield started


@pytest.fixture(scope="session")
def gpu_node(control_plane, node):
    assets, store = find_node_assets(), IMAGE_STORE.with_name("containerd-gpu")
    with local_stack.gpu_node(control_plane, assets, node, store) as started:
        print(f"node {started.name} Ready in {started.start_seconds:.1f} s")
        yield started


@pytest.fixture(scope="session")
def image_archives(tmp_path_factory) -> Path:
    """Images saved from podman this session (one save for both nodes), removed after it."""
    folder = tmp_path_factory.mktemp("image-archives")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def gpu_images(gpu_node, images, image_archives) -> Images:
    started = time.monotonic()
    import_images([gpu_node], [images.trainer], archives=image_archives)
    print(f"trainer image into the GPU node: {time.monotonic() - started:.0f} s")
    return images


@pytest.fixture(scope="session")
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
