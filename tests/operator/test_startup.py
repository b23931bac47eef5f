"""The operator as users start it (``kopf run -m rltrainer_operator``), on a control plane of its own
that starts without our CRDs: it says what is missing in one line per try, keeps retrying with
backoff, and reconciles as soon as both CRDs are installed. On a KubeRay older than its floor
(v1.6, whose RayCluster CRD first has ``authOptions.secretName``: KubeRay v1.5.1's own CRDs here)
it refuses to start, in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import wait_for

from rltrainer_operator.handlers import EXIT_KUBERAY_TOO_OLD
from rltrainer_operator.testing import kuberay, parts
from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from tests.conftest import RLX_CRD, kuberay_crd_files

KOPF = str(Path(sys.executable).with_name("kopf"))


@pytest.fixture(scope="module")
def bare_plane():
    """One control plane for the module, started without CRDs and with namespace ``ml``. The
    tests run in file order: the one that waits for the CRDs first, then the one that installs
    KubeRay v1.5's over them (either alone also starts from no CRDs)."""
    assets = find_assets()
    if assets is None:
        pytest.skip(MISSING_ASSETS)
    with ControlPlane(assets) as plane:
        plane.kubectl_run("create", "namespace", "ml")
        yield plane


def kopf_run(plane: ControlPlane, log: Path) -> subprocess.Popen:
    """``kopf run`` of the operator as a user starts it, watching namespace ``ml``."""
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.kubeconfig),
        "RLTRAINER_OPERATOR_METRICS_PORT": "0",
        "RLTRAINER_OPERATOR_RAY_TOKEN_KEY": "a-test-key",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [KOPF, "run", "--standalone", "-n", "ml", "-m", "rltrainer_operator"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def test_kopf_run_waits_for_the_crds_then_reconciles(bare_plane, tmp_path):
    plane = bare_plane
    log = tmp_path / "operator.log"
    operator = kopf_run(plane, log)
    try:
        wait_for(
            "the missing CRDs named",
            lambda: "not installed: rlexperiments.rltrainer.io" in log.read_text(),
            60,
        )
        plane.install_crds(RLX_CRD)
        wait_for(
            "only KubeRay's CRD missing",
            lambda: any(
                "not installed: rayclusters.ray.io" in line and "rlexperiments" not in line
                for line in log.read_text().splitlines()
            ),
            60,
        )
        plane.install_crds(*kuberay_crd_files())
        plane.kubectl_run("apply", "-n", "ml", "-f", "-", stdin=EXPERIMENT)
        started = time.monotonic()
        wait_for(
            "phase Provisioning",
            lambda: (
                plane.kubectl_run(
                    "get", "rlx", "-n", "ml", "cartpole", "-o", "jsonpath={.status.phase}", check=False
                ).stdout
                == "Provisioning"
            ),
            60,
        )
        assert plane.kubectl_run("get", "raycluster", "-n", "ml", "rlx-cartpole", check=False).returncode == 0
        print(f"reconciled {time.monotonic() - started:.1f}s after the CRDs were installed")
    finally:
        operator.send_signal(signal.SIGTERM)
        operator.wait(30)
    text = log.read_text()
    tries = [line for line in text.splitlines() if "not installed:" in line]
    assert len(tries) >= 2 and all(line.count("\n") == 0 for line in tries)
    assert "Traceback" not in text, text


def test_kopf_run_refuses_a_kuberay_below_its_floor(bare_plane, tmp_path):
    """KubeRay v1.5's CRD (its module's own) lacks authOptions.secretName: the API server would
    prune it, KubeRay would make its own token and every job request would get 401."""
    plane = bare_plane
    try:
        old_crds = kuberay.crd_files("kuberay-below-floor")
    except parts.PartError as err:
        pytest.skip(f"KubeRay v1.5's module: {err}")
    plane.install_crds(RLX_CRD, *old_crds)
    log = tmp_path / "operator.log"
    operator = kopf_run(plane, log)
    try:
        operator.wait(60)
    finally:
        operator.kill()
    text = log.read_text()
    assert operator.returncode == EXIT_KUBERAY_TOO_OLD, text
    (line,) = [line for line in text.splitlines() if "older than v1.6.0" in line]
    assert "authOptions.secretName" in line and "upgrade KubeRay" in line, line
    assert "Traceback" not in text, text


EXPERIMENT = """
apiVersion: rltrainer.io/v1alpha1
kind: RLExperiment
metadata: {name: cartpole}
spec:
  algorithm: PPO
  env: CartPole-v1
  checkpoint: {uri: "s3://checkpoints/rl"}
"""
