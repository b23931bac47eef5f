"""The chart as a Helm release on a real API server: Helm's own install, upgrade, rollback and
uninstall (the Helm v4 SDK the chart tests render with, helm-python-sdk), and the CRD upgrade
path of the install page.

Helm applies ``crds/`` on the first install only, and never upgrades or deletes it. Helm v4
applies it server-side, so the fields belong to Helm's field manager: the install page's
``kubectl apply --server-side`` after an upgrade must take them over (``--force-conflicts``),
and without it the apply is refused with a conflict, as this test shows. No node runs here (the
Deployment's Pod never starts); tests/node/test_helm_release.py runs the release with the
operator Pod and an experiment training.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import helm_python
import pytest
import yaml

from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from tests.charts.helpers import CHART_DIR, NAMESPACE, RELEASE

ROOT = Path(__file__).resolve().parents[2]
CRD_NAME = "rlexperiments.rltrainer.io"
#: The install page's CRD upgrade command, run here as written there.
CRD_UPGRADE = "kubectl apply --server-side --force-conflicts -f crds/"
EXPERIMENT = {
    "apiVersion": "rltrainer.io/v1alpha1",
    "kind": "RLExperiment",
    "metadata": {"name": "kept", "namespace": "default"},
    "spec": {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "checkpoint": {"uri": "s3://rl-checkpoints/experiments"},
    },
}
#: The field the older chart's CRD lacks.
NEW_FIELD = {"activeDeadlineSeconds": 3600}


@pytest.fixture(scope="module")
def plane():
    """A control plane of its own: without the RLExperiment CRD until Helm installs it."""
    assets = find_assets()
    if assets is None:
        pytest.skip(MISSING_ASSETS)
    with ControlPlane(assets) as started:
        yield started


def older_chart(tmp_path: Path) -> tuple[Path, str]:
    """The chart with one field missing from its CRD's spec, as an older release's would be."""
    chart = tmp_path / "rltrainer-operator"
    shutil.copytree(CHART_DIR, chart)
    (path,) = (chart / "crds").glob("*.yaml")
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    spec.pop("activeDeadlineSeconds")
    path.write_text(yaml.safe_dump(crd))
    return chart, "activeDeadlineSeconds"


def crd_fields(plane: ControlPlane) -> set[str]:
    crd = yaml.safe_load(plane.kubectl_run("get", "crd", CRD_NAME, "-o", "yaml").stdout)
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def deployment_image(plane: ControlPlane) -> str:
    found = yaml.safe_load(
        plane.kubectl_run("get", "deployment", RELEASE, "-n", NAMESPACE, "-o", "yaml").stdout
    )
    return found["spec"]["template"]["spec"]["containers"][0]["image"]


def test_install_upgrade_rollback_uninstall_and_the_crd_upgrade_path(plane, tmp_path) -> None:
    helm = helm_python.Config(kubeconfig_path=str(plane.kubeconfig), namespace=NAMESPACE)
    old, missing = older_chart(tmp_path)
    helm.install(str(old), RELEASE, {}, namespace=NAMESPACE, create_namespace=True)
    assert missing not in crd_fields(plane)  # Helm installed the older chart's CRD
    plane.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump(EXPERIMENT))
    with_new_field = {**EXPERIMENT, "spec": {**EXPERIMENT["spec"], **NEW_FIELD}}
    refused = plane.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump(with_new_field), check=False)
    assert f'unknown field "spec.{missing}"' in refused.stderr, refused.stderr

    # helm upgrade to this chart with a changed value: the Deployment changes, the CRD does not.
    helm.upgrade(str(CHART_DIR), RELEASE, {"image": {"tag": "upgraded"}}, namespace=NAMESPACE)
    assert deployment_image(plane).endswith(":upgraded")
    assert missing not in crd_fields(plane)

    # The CRD upgrade path: Helm owns the CRD's fields (server-side), so a plain server-side apply
    # is refused with a conflict; the install page's command takes them over.
    refused = plane.kubectl_run("apply", "--server-side", "-f", str(ROOT / "crds"), check=False)
    assert refused.returncode != 0 and "conflict" in refused.stderr, refused.stderr
    command = CRD_UPGRADE.split()
    plane.kubectl_run(*command[1:-1], str(ROOT / "crds"))
    assert missing in crd_fields(plane)
    plane.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump(with_new_field))  # the field is known now
    install_page = (ROOT / "docs" / "platform" / "install.md").read_text()
    assert CRD_UPGRADE in install_page, "the install page's CRD upgrade command is the one tested"

    # helm rollback: the previous revision's Deployment, as a new revision; the CRD stays upgraded.
    helm.rollback(RELEASE)
    assert not deployment_image(plane).endswith(":upgraded")
    assert [entry["revision"] for entry in helm.history(RELEASE)] == [1, 2, 3]
    assert missing in crd_fields(plane)

    # helm uninstall: the release's objects go; the CRD and the experiments stay (crds/ policy).
    helm.uninstall(RELEASE)
    gone = plane.kubectl_run("get", "deployment", RELEASE, "-n", NAMESPACE, check=False)
    assert gone.returncode != 0 and re.search("not ?found", gone.stderr, re.IGNORECASE), gone.stderr
    assert "kept" in plane.kubectl_run("get", "rlexperiments", "-n", "default", "-o", "name").stdout
    assert missing in crd_fields(plane)
