"""Settings and fixtures for the whole suite.

``control_plane``: a real Kubernetes control plane (``rltrainer_operator.testing.envtest``:
etcd, kube-apiserver, kube-controller-manager on 127.0.0.1), started once per session with our
RLExperiment CRD and KubeRay's RayCluster CRD installed the way users install them
(``kubectl apply --server-side``). Tests that use it skip, saying how to get the binaries, when
there are none (``KUBEBUILDER_ASSETS`` unset and no ``../shared/envtest``).
"""

import os
from pathlib import Path

import pytest

# Operator timers tick every second in tests (the default is 10 s); read when handlers import.
os.environ.setdefault("RLTRAINER_OPERATOR_POLL_INTERVAL_S", "1")
# Under pytest-xdist (`make test` runs the suite in 2 worker processes) each worker keeps its
# Ray instances' files in its own folder, where a bare ``ray.init()`` (Tune's) looks for the
# latest cluster: a worker never attaches to the other's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("RAY_TMPDIR", f"/tmp/ray-{os.environ['PYTEST_XDIST_WORKER']}")
# The key the operator derives each experiment's Ray token from (the chart generates one).
os.environ.setdefault("RLTRAINER_OPERATOR_RAY_TOKEN_KEY", "test-ray-token-key")

ROOT = Path(__file__).resolve().parents[1]
RLX_CRD = ROOT / "crds" / "rltrainer.io_rlexperiments.yaml"
#: KubeRay v1.7.0's RayCluster CRD, as KubeRay publishes it.
RAYCLUSTER_CRD = ROOT / "tests" / "operator" / "data" / "kuberay" / "ray.io_rayclusters.yaml"


#: Files holding the longest tests, collected first: under pytest-xdist each starts early on a
#: worker instead of keeping one worker busy alone at the end (the others keep their order).
LONG_FIRST = (
    "test_readme.py",
    "test_journey.py",
    "test_docs.py",
    "test_learner_restarts.py",
    "test_cql.py",
    "test_sac.py",
    "test_multi_agent.py",
    "test_tune.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def control_plane():
    from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets

    assets = find_assets()
    if assets is None:
        pytest.skip(MISSING_ASSETS)
    with ControlPlane(assets) as plane:
        plane.install_crds(RAYCLUSTER_CRD, RLX_CRD)
        yield plane


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance for one test module (4 logical CPUs on any machine), shut down
    after it so that other modules (test_distributed's multi-node cluster) can start theirs.
    Actors import test helpers (``tests.envs``) by module path."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",  # a new instance, never one another run on this machine started
        num_cpus=4,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    yield
    ray.shutdown()


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch):
    """A moto S3 server on 127.0.0.1 with an empty bucket "trajectories", and fake AWS
    credentials in the environment; yields ``(endpoint, boto3 client)``."""
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEOUTPUT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="trajectories")
    yield endpoint, client
    server.stop()
