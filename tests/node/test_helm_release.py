"""A Helm release of the operator while an experiment trains on real Pods: ``helm upgrade`` with a
changed value and a new operator image, ``helm rollback``, ``helm uninstall`` and an install
again, with Helm's own client (the Helm v4 SDK). The experiment keeps training through all of it,
on its one cluster and its one driver job; the operator reads its progress from the real S3
server with its own identity (the chart's ``s3.credentialsSecret``), the pods write with theirs.
``make e2e`` (about 6 minutes on 2 cores).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from typing import Any

import pytest

from rltrainer_operator.testing.node import import_images, podman_env
from rltrainer_operator.testing.s3_server import REGION, S3Server
from tests.charts.helpers import CHART_DIR
from tests.conftest import built_part
from tests.e2e.helpers import wait_for
from tests.node.helpers import apply, get, helm

NAMESPACE = "rltrainer-helm"
WATCHED = "helm-experiments"
RELEASE = "rlt-helm"
BUCKET = "rl-checkpoints"
NAME = "through-upgrades"


@pytest.fixture
def s3(pod_network, tmp_path):
    """The real S3 server on the pod network's gateway, where Pods reach it."""
    server = S3Server(built_part("seaweedfs"), tmp_path / "s3", host=pod_network.gateway, buckets=[BUCKET])
    server.start()
    try:
        yield server
    finally:
        server.stop(graceful=False)  # SeaweedFS takes 10-15 s to end on SIGTERM; the data is the test's


def secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": encoded,
    }


def values(s3: S3Server, image: str, **more: Any) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "watch": {"clusterWide": False, "namespaces": [WATCHED]},
        "s3": {"endpointURL": s3.endpoint, "region": REGION, "credentialsSecret": {"name": "operator-s3"}},
        "operator": {"pollIntervalSeconds": 1},
        "terminationGracePeriodSeconds": 20,
        # One replica (with its leader elector): these tests follow "the" operator Pod; two
        # replicas electing one are tests/operator/test_leader_election.py's.
        "replicas": 1,
        **more,
    }


def experiment(trainer_image: str) -> dict[str, Any]:
    """PPO on CartPole paced at 1.5 s an iteration, long enough to outlast the release's changes;
    S3's endpoint from the chart's default (``s3.endpointURL``), the pods' keys from their Secret."""
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": NAME, "namespace": WATCHED},
        "spec": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "config": {
                "train_batch_size": 256,
                "minibatch_size": 128,
                "num_epochs": 2,
                "min_time_s_per_iteration": 1.5,
            },
            "stop": {"training_iteration": 1000},
            "checkpoint": {"uri": f"s3://{BUCKET}/helm", "frequency": 5},
            "storage": {"credentialsSecretRef": {"name": "s3-creds"}},
            "image": trainer_image,
            "imagePullPolicy": "Never",
            "head": {"cpu": "500m", "memory": "2Gi"},
            "learners": {"replicas": 0},
            "rollouts": {"replicas": 1, "cpusPerRunner": 0.5, "memory": "1Gi"},
        },
    }


def status(plane) -> dict[str, Any]:
    return (get(plane, "rlexperiment", NAME, "-n", WATCHED) or {}).get("status") or {}


def operator_pod(plane) -> dict[str, Any] | None:
    found = get(plane, "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}") or {
        "items": []
    }
    live = [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]
    ready = [
        p for p in live if all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}])
    ]
    return ready[0] if len(live) == 1 and ready else None


def operator_env(plane, image: str, what: str) -> dict[str, str]:
    """Once the release's one ready operator Pod runs ``image``: its container's environment."""
    pod = wait_for(
        what,
        lambda: (p := operator_pod(plane)) and p["spec"]["containers"][0]["image"] == image and p,
        180,
    )
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def trains_on(plane, job_id: str, beyond: int, what: str) -> int:
    """Wait until the experiment's status (written by the operator Pod) passes ``beyond``, on
    the same driver job, never restarted; the iteration it reached."""
    found = wait_for(
        what,
        lambda: (s := status(plane)) and (s.get("iteration") or 0) > beyond and s,
        180,
    )
    assert found["phase"] == "Running" and found["jobId"] == job_id and found["restarts"] == 0, found
    return found["iteration"]


def progress_in_s3(s3: S3Server) -> int:
    """The iteration the driver last wrote to S3 (``progress.json``), read as the admin."""
    raw = (
        s3.client("admin")
        .get_object(Bucket=BUCKET, Key=f"helm/{WATCHED}/{NAME}/progress.json")["Body"]
        .read()
    )
    return int(json.loads(raw)["iteration"])


def next_operator_image(image: str) -> str:
    """A new operator image (a new image id: the same content with one label more), as a
    release's would be."""
    tag = f"{image}-next"
    subprocess.run(
        ["podman", "build", "--pull=never", "-q", "-t", tag, "-f", "-"],
        input=f"FROM {image}\nLABEL io.rltrainer.test=next-release\n",
        text=True,
        check=True,
        capture_output=True,
        env=podman_env(),
        timeout=300,
    )
    return tag


@pytest.mark.e2e_only
@pytest.mark.usefixtures("kuberay_operator")
def test_upgrade_rollback_and_uninstall_while_an_experiment_trains(
    control_plane, cluster_network, node, images, s3, image_archives
) -> None:
    if not cluster_network.service_proxy:
        pytest.skip("another test cluster on this machine runs its kube-proxy: no `kubernetes` Service here")
    plane = control_plane
    for namespace in (NAMESPACE, WATCHED):
        plane.kubectl_run("create", "namespace", namespace, check=False)
    apply(plane, secret("operator-s3", NAMESPACE, s3.identity("operator").env()))
    apply(plane, secret("s3-creds", WATCHED, s3.identity("trainer").env()))
    client = helm(plane, NAMESPACE)

    def install() -> None:
        options = {"namespace": NAMESPACE, "wait": "watcher", "timeout": 300}
        client.install(str(CHART_DIR), RELEASE, values(s3, images.operator), **options)

    try:
        install()
        apply(plane, experiment(images.trainer))
        running = wait_for(
            "the experiment training",
            lambda: (s := status(plane)) and (s.get("iteration") or 0) >= 3 and s,
            300,
        )
        job_id = running["jobId"]

        # helm upgrade: a new operator image and a changed value; the new Pod takes over.
        upgraded = next_operator_image(images.operator)
        import_images([node], [upgraded], archives=image_archives)
        before = status(plane)["iteration"]
        started = time.monotonic()
        client.upgrade(
            str(CHART_DIR),
            RELEASE,
            values(s3, upgraded, operator={"pollIntervalSeconds": 2}),
            namespace=NAMESPACE,
            wait="watcher",
            timeout=300,
        )
        env = operator_env(plane, upgraded, "the upgraded operator Pod")
        assert env["RLTRAINER_OPERATOR_POLL_INTERVAL_S"] == "2"
        after_upgrade = trains_on(plane, job_id, before, "status moving under the upgraded operator")
        print(f"helm upgrade to the new Pod reporting: {time.monotonic() - started:.1f} s")

        # helm rollback: revision 1's image and values again, as revision 3.
        client.rollback(RELEASE, wait="watcher", timeout=300)
        env = operator_env(plane, images.operator, "the rolled-back operator Pod")
        assert env["RLTRAINER_OPERATOR_POLL_INTERVAL_S"] == "1"
        assert [r["revision"] for r in client.history(RELEASE)] == [1, 2, 3]
        after_rollback = trains_on(
            plane, job_id, after_upgrade, "status moving under the rolled-back operator"
        )

        # helm uninstall: no operator; the experiment, its cluster and its job go on (the CRD
        # and the experiments are not the release's to delete).
        client.uninstall(RELEASE, wait="watcher", timeout=120)
        assert get(plane, "deployment", RELEASE, "-n", NAMESPACE) is None
        left = get(plane, "rlexperiment", NAME, "-n", WATCHED)
        assert left is not None and left["metadata"]["finalizers"], left["metadata"]
        assert len(get(plane, "rayclusters", "-n", WATCHED)["items"]) == 1
        frozen = status(plane)["iteration"]
        wait_for(
            "training on without an operator",
            lambda: progress_in_s3(s3) >= max(frozen, after_rollback) + 3,
            120,
        )

        # Installed again: the new operator takes the experiment over where it is.
        install()
        trains_on(plane, job_id, progress_in_s3(s3) - 1, "status caught up under the reinstalled operator")
        plane.kubectl_run("delete", "rlexperiment", NAME, "-n", WATCHED, "--wait=true", "--timeout=120s")
        wait_for("the experiment's Pods gone", lambda: not get(plane, "pods", "-n", WATCHED)["items"], 120)
    finally:
        # Without an operator (a failure between uninstall and install) the finalizer would hold.
        if operator_pod(plane) is None and get(plane, "rlexperiment", NAME, "-n", WATCHED):
            plane.kubectl_run("delete", "rayclusters", "--all", "-n", WATCHED, "--wait=false", check=False)
            plane.kubectl_run(
                "patch",
                "rlexperiment",
                NAME,
                "-n",
                WATCHED,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":[]}}',
                check=False,
            )
        plane.kubectl_run(
            "delete", "rlexperiments", "--all", "-n", WATCHED, "--wait=true", "--timeout=120s", check=False
        )
        client.uninstall(RELEASE, wait="watcher", timeout=120, ignore_not_found=True)
        for namespace in (WATCHED, NAMESPACE):
            plane.kubectl_run("delete", "namespace", namespace, "--wait=false", check=False)
