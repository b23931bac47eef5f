"""Settings and fixtures for the whole suite.

``control_plane``: a real Kubernetes control plane (``rltrainer_operator.testing.envtest``:
etcd, kube-apiserver, kube-controller-manager on 127.0.0.1), started once per session with our
RLExperiment CRD and KubeRay's CRDs (those of the KubeRay module ``parts.toml`` pins, from Go's
module cache) installed the way users install them (``kubectl apply --server-side``). Tests that
use it skip, saying how to get the binaries, when there are none (``KUBEBUILDER_ASSETS`` unset and
no ``../shared/envtest``) or KubeRay's module cannot be had (no ``go``).
"""

import os
from pathlib import Path
from typing import Any

import pytest

#: RLTRAINER_TEST_CPU_REPORT=FILE: each test's CPU seconds, its processes' included (tests/cpu_report.py).
pytest_plugins = ["tests.cpu_report"]

# The suite keeps both cores busy: OpenMP's threads (torch's, where a test or tuned example asks
# for two) wait for work passively instead of spinning, which on busy cores burned many times
# the computation's own CPU (CQL's updates: 49 CPU-s against 2.3 with one thread). Read when
# torch loads, so here, before any test imports it; the processes the tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Operator timers tick every second in tests (the default is 10 s); read when handlers import.
os.environ.setdefault("RLTRAINER_OPERATOR_POLL_INTERVAL_S", "1")
# Under pytest-xdist (`make test` runs the suite in 3 worker processes) each worker keeps its
# Ray instances' files in its own folder, where a bare ``ray.init()`` (Tune's) looks for the
# latest cluster: a worker never attaches to the other's.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("RAY_TMPDIR", f"/tmp/ray-{os.environ['PYTEST_XDIST_WORKER']}")
# The key the operator derives each experiment's Ray token from (the chart generates one).
os.environ.setdefault("RLTRAINER_OPERATOR_RAY_TOKEN_KEY", "test-ray-token-key")

ROOT = Path(__file__).resolve().parents[1]
RLX_CRD = ROOT / "crds" / "rltrainer.io_rlexperiments.yaml"


#: The files that take longest (measured under ``make test``), longest first, collected in this
#: order before the others: ``make test`` passes ``--no-loadscope-reorder`` so that pytest-xdist
#: hands out files in this order (by default it starts with the files holding the most tests,
#: which left the journey and the README for the end, one worker alone with them).
LONG_FIRST = (
    "test_images_on_node.py",
    "test_operator_in_pod.py",
    "test_kuberay_on_pods.py",
    "test_platform_on_pods.py",
    "test_cluster_faults.py",
    "test_docs.py",
    "test_cli_documents.py",
    "test_tune.py",
    "test_distributed.py",
    "test_sim_cluster.py",
    "test_handlers.py",
    "test_cql.py",
    "test_impala_appo.py",
    "test_startup.py",
    "test_sac.py",
    "test_journey.py",
    "test_rbac_revoked.py",
    "test_a2c_pg.py",
    "test_leader_election.py",
    "test_multi_agent.py",
    "test_learner_restarts.py",
    "test_torch_compile.py",
)


def pytest_xdist_make_scheduler(config, log):
    """Whole files to each worker (``--dist loadfile``), except that ``tests/node``'s files go to
    one worker together: they share one real node (its kubelet, containerd and images)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NodeTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for folder in TOGETHER:
                if nodeid.startswith(folder + "/"):
                    return folder
            return super()._split_scope(nodeid)

    return NodeTestsTogether(config, log)


#: Folders whose files one pytest-xdist worker runs together: ``tests/node``'s share one real
#: node (its kubelet, containerd and images); ``tests/operator``'s one control plane, started
#: once and stopped after its last test (``control_plane``) instead of once in every worker and
#: idling there to the end (3 CPU-s a minute each).
TOGETHER = ("tests/node", "tests/operator")


def _attach_log_capture_under_loggings_lock() -> None:
    """At the start of each test phase pytest attaches its log capture to every logger, iterating
    logging's logger dict without logging's lock (``_pytest.logging.catching_logs.__enter__``). A
    thread a test left running (kopf's operator, moto's server, a boto3 client) that creates a
    logger at that moment ends the phase in ``RuntimeError: dictionary changed size during
    iteration`` (seen in the journey on Pods). ``logging.getLogger`` adds loggers under that lock,
    so attaching under it too removes the race."""
    import logging

    from _pytest.logging import catching_logs

    attach = catching_logs.__enter__

    def attach_locked(self):
        with logging._lock:  # an RLock: addHandler and setLevel inside take it again
            return attach(self)

    catching_logs.__enter__ = attach_locked


#: One setting for slow machines: every test's deadline (pytest-timeout's, and each wait of
#: ``tests.e2e.helpers.wait_for``) times this. Deadlines are a last guard: waits end on the state
#: they wait for, and fail early on one that cannot lead there.
TIMEOUT_SCALE_VARIABLE = "RLTRAINER_TEST_TIMEOUT_SCALE"


def timeout_scale() -> float:
    raw = os.environ.get(TIMEOUT_SCALE_VARIABLE, "1")
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not 1 <= scale <= 20:
        raise pytest.UsageError(f"{TIMEOUT_SCALE_VARIABLE}={raw!r}: give a number from 1 to 20 (default 1)")
    return scale


def pytest_configure(config: pytest.Config) -> None:
    scale = timeout_scale()
    if scale != 1 and config.getini("timeout"):
        config.option.timeout = float(config.getini("timeout")) * scale
    _attach_log_capture_under_loggings_lock()
    # Here, not in tests/e2e: tests/node reuses the end-to-end journeys (and their marks).
    config.addinivalue_line("markers", "e2e: end to end with real local Ray clusters (make e2e)")
    config.addinivalue_line("markers", "in_make_test: an end-to-end test that make test runs too")
    config.addinivalue_line(
        "markers",
        "e2e_only(kept): a test only make e2e runs, skipped before its fixtures start otherwise; "
        "`kept` names the smaller check make test runs in its place",
    )


def e2e_requested(config: pytest.Config) -> bool:
    """Whether the end-to-end tests were asked for: ``-m e2e`` (or ``-m e2e_only``), a path under
    ``tests/e2e`` on the command line, or ``RLTRAINER_E2E=1`` (``make e2e``); not by a plain
    ``pytest``."""
    marks = config.getoption("-m") or ""
    return (
        ("e2e" in marks and "not e2e" not in marks)
        or any("e2e" in str(arg) for arg in config.args)
        or os.environ.get("RLTRAINER_E2E") == "1"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long files first; tests marked ``e2e_only`` skipped unless ``make e2e`` asked for them
    (``e2e_requested``); each test's own ``timeout`` mark (tests/node's conftest adds them before
    this runs) times ``RLTRAINER_TEST_TIMEOUT_SCALE``."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    if not e2e_requested(config):
        for item in items:
            mark = item.get_closest_marker("e2e_only")
            if mark is not None:
                kept = f"; make test runs {mark.args[0]}" if mark.args else ""
                item.add_marker(pytest.mark.skip(reason=f"make e2e only (RLTRAINER_E2E=1){kept}"))
    scale = timeout_scale()
    if scale == 1:
        return
    for item in items:
        mark = item.get_closest_marker("timeout")
        if mark is not None and mark.args:
            item.add_marker(pytest.mark.timeout(float(mark.args[0]) * scale), append=False)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest):
    """A real control plane (etcd, kube-apiserver, kube-controller-manager) with KubeRay's and
    our CRDs, kept while consecutive test files use it and stopped after the last of them
    (``pytest_runtest_teardown``): an idle one costs 3 CPU-s a minute until the session ends."""
    from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets

    assets = find_assets()
    if assets is None:
        pytest.skip(MISSING_ASSETS)
    crds = kuberay_crd_files()
    with ControlPlane(assets) as plane:
        plane.install_crds(*crds, RLX_CRD)
        _RUNNING_PLANE.append((request._fixturedef, request))
        try:
            yield plane
        finally:
            _RUNNING_PLANE.clear()


def kuberay_crd_files() -> list[Path]:
    """KubeRay's own CRDs (its pinned module's); the calling test skips, saying why, without them."""
    from rltrainer_operator.testing import kuberay, parts

    try:
        return kuberay.crd_files()
    except parts.PartError as err:
        pytest.skip(f"KubeRay's CRDs: {err}")


def built_part(name: str) -> Path:
    """A real component's binary (``make parts`` builds them; ``make test`` does when missing);
    the calling test skips, saying how to build it, without it."""
    from rltrainer_operator.testing import parts

    found = parts.find(name)
    if found is None:
        pytest.skip(f"{name} is not built: `make {name}` (Go and the module proxy)")
    return found


@pytest.fixture(scope="session")
def shared_ray_cluster():
    """One local Ray cluster (a head node with 4 logical CPUs, on any machine, and the GPUs torch
    sees) per test process, which the modules that need Ray connect to in turn (``local_ray``).
    Starting an instance takes 5-20 s on 2 busy cores; connecting takes a fraction of a second."""
    import ray
    import torch
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
        ensure_token_if_auth_enabled,
    )
    from ray._private.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    from tests.ray_clusters import checkout_on_pythonpath

    if ray.is_initialized():
        ray.shutdown()
    # What a local ray.init() does first (Ray 2.60): token authentication, with a token in
    # ~/.ray/auth_token, for this process and the processes it starts. Without it this cluster
    # would run without authentication, and once a test had started a local instance (which turns
    # token mode on in this process) the process's connections to this cluster would be refused.
    enable_token_auth_by_default()
    ensure_token_if_auth_enabled()
    # Cluster's nodes have no GPUs unless told (ray.init would detect them): the GPU tests need them.
    head = {"num_cpus": 4, "num_gpus": torch.cuda.device_count(), "include_dashboard": False}
    with checkout_on_pythonpath():
        cluster = Cluster(initialize_head=True, head_node_args=head)
    # Cluster leaves its address where a bare ``ray.init()`` looks for one: remove it, so that
    # such calls (Tune's, the CLI's in subprocesses) start their own instance as they would
    # elsewhere instead of sharing these 4 CPUs with the module's own actors.
    Path(get_ray_address_file(None)).unlink(missing_ok=True)
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def local_ray(shared_ray_cluster):
    """Ray for one test module: a driver connection to the process's shared cluster, closed
    after the module. Closing it ends the module's Ray job, which kills the job's actors and
    removes its placement groups, so each module starts with all 4 CPUs free, as on a new
    instance."""
    import time

    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address=shared_ray_cluster.address)
    # The previous module's job is cleaned up asynchronously: wait until its CPUs are back.
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    yield
    ray.shutdown()


#: The buckets of the tests' S3 server (``real_s3``); every identity has rights on them.
TEST_BUCKETS = ("rltrainer-test", "trajectories", "exists")


@pytest.fixture(scope="session")
def real_s3(tmp_path_factory):
    """A real S3 server (SeaweedFS, ``make seaweedfs``) on 127.0.0.1 for this test process, with
    ``TEST_BUCKETS`` and its identities (``rltrainer_operator.testing.s3_server``); started at the
    first test that asks for it (~5 s), stopped at the end of the session."""
    from rltrainer_operator.testing.s3_server import S3Server

    server = S3Server(built_part("seaweedfs"), tmp_path_factory.mktemp("s3"), buckets=list(TEST_BUCKETS))
    server.start()
    try:
        yield server
    finally:
        server.stop(graceful=False)  # SeaweedFS takes 10-15 s to end on SIGTERM; the data is the session's


def use_s3_identity(monkeypatch: pytest.MonkeyPatch, server, identity: str = "trainer") -> None:
    """The environment of a process on ``server`` as ``identity``: the standard AWS variables,
    and nothing of this machine's own AWS configuration."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in server.identity(identity).env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")


def empty_bucket(client, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch, real_s3):
    """The real S3 server's bucket "trajectories", emptied, and the pods' identity (``trainer``)
    in the environment; yields ``(endpoint, an admin boto3 client)``."""
    client = real_s3.client("admin")
    empty_bucket(client, "trajectories")
    use_s3_identity(monkeypatch, real_s3)
    yield real_s3.endpoint, client


#: The running ``control_plane`` fixture's definition and request, to stop it early.
_RUNNING_PLANE: list[tuple[Any, Any]] = []
_PLANE_FILES = pytest.StashKey[set]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Stop the session's control plane once the next test's file has no test that uses it (the
    module fixtures built on it are down by then); a later file that needs one starts it again."""
    yield
    if not _RUNNING_PLANE:
        return
    session = item.session
    if _PLANE_FILES not in session.stash:
        session.stash[_PLANE_FILES] = {i.path for i in session.items if "control_plane" in i.fixturenames}
    if nextitem is None or nextitem.path not in session.stash[_PLANE_FILES]:
        fixturedef, request = _RUNNING_PLANE.pop()
        fixturedef.finish(request)
