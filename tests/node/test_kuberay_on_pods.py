"""Real KubeRay on real Pods: a RayCluster the operator builds becomes a head Pod and worker Pods
on the node (KubeRay's own operator makes them), Ray starts in them from the trainer image with
KubeRay's command, the workers find the head by its Service's DNS name and join it, and the job
API the operator uses answers on the head Pod."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from rltrainer_operator.builders.ray_token import build_token_secret, ray_token
from rltrainer_operator.builders.raycluster import build_raycluster
from rltrainer_operator.ray_jobs import RayAuthError, RayJobClient
from rltrainer_operator.settings import Settings
from rltrainer_operator.validation import validate_experiment
from tests.e2e.helpers import wait_for
from tests.node.helpers import apply, describe, get

NAMESPACE = "kuberay-on-pods"
TOKEN_KEY = "kuberay-pods-test-key"


@pytest.fixture(scope="module")
def kuberay(control_plane, kuberay_operator):
    control_plane.kubectl_run("create", "namespace", NAMESPACE, check=False)
    yield kuberay_operator
    control_plane.kubectl_run(
        "delete", "rayclusters", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=60s", check=False
    )


def experiment(name: str, image: str) -> dict:
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid4())},
        "spec": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "image": image,
            "imagePullPolicy": "Never",
            "checkpoint": {"uri": "s3://rl-checkpoints/x"},
            "head": {"cpu": "500m", "memory": "1500Mi"},
            "learners": {"replicas": 0},
            "rollouts": {"replicas": 1, "cpusPerRunner": 1, "memory": "1200Mi"},
        },
    }


#: Where ``RLTRAINER_RECORD_KUBERAY=1`` writes what real KubeRay made (tests/operator reads it:
#: the process stand-in's status and pod_problems are checked against it).
RECORDED = Path(__file__).resolve().parents[1] / "operator" / "data" / "kuberay_recorded"


def record_what_kuberay_made(plane, cluster: dict, pods: list[dict]) -> None:
    """The ready RayCluster, its Pods and head Service as KubeRay made them, when asked to."""
    if not os.environ.get("RLTRAINER_RECORD_KUBERAY"):
        return
    RECORDED.mkdir(exist_ok=True)
    name = cluster["metadata"]["name"]
    (service,) = get(plane, "services", "-n", NAMESPACE, "-l", f"ray.io/cluster={name}")["items"]
    objects = {"raycluster": cluster, "head-service": service}
    for pod in pods:
        objects[f"{pod['metadata']['labels']['ray.io/node-type']}-pod"] = pod
    for kind, obj in objects.items():
        obj["metadata"].pop("managedFields", None)
        (RECORDED / f"{kind}.json").write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


@pytest.mark.usefixtures("kuberay")
def test_a_rayclusters_pods_run_ray_and_answer_the_job_api(control_plane, images) -> None:
    body = experiment("pods", images.trainer)
    spec = validate_experiment(body).spec
    settings = Settings(ray_token_key=TOKEN_KEY)
    cluster = build_raycluster(body, spec, settings)
    cluster["metadata"].pop("ownerReferences")  # no RLExperiment object owns it in this test
    token = ray_token(TOKEN_KEY, body["metadata"]["uid"])
    secret = build_token_secret(body, cluster["metadata"]["name"], token)
    secret["metadata"].pop("ownerReferences")
    apply(control_plane, secret, cluster)
    name = cluster["metadata"]["name"]
    started = time.monotonic()

    def ready() -> dict | None:
        found = get(control_plane, "raycluster", name, "-n", NAMESPACE) or {}
        conditions = {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions", [])}
        return (
            found
            if conditions.get("HeadPodReady") == "True" and conditions.get("RayClusterProvisioned") == "True"
            else None
        )

    found = wait_for(
        "the RayCluster ready on real Pods",
        ready,
        240,
        explain=lambda: (
            control_plane.kubectl_run("get", "pods", "-n", NAMESPACE, "-o", "wide", check=False).stdout
            + "\n".join(
                describe(control_plane, "pod", p["metadata"]["name"], NAMESPACE)
                for p in get(control_plane, "pods", "-n", NAMESPACE)["items"]
            )
        ),
    )
    print(f"RayCluster ready on real Pods in {time.monotonic() - started:.0f} s")
    pods = get(control_plane, "pods", "-n", NAMESPACE, "-l", f"ray.io/cluster={name}")["items"]
    record_what_kuberay_made(control_plane, found, pods)
    groups = sorted(p["metadata"]["labels"]["ray.io/group"] for p in pods)
    assert groups == ["headgroup", "rollouts"], groups
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    assert head["spec"]["containers"][0]["args"][0].startswith("ulimit -n 65536; ray start --head")
    assert found["status"]["head"]["podIP"] == head["status"]["podIP"]

    jobs = RayJobClient(f"http://{head['status']['podIP']}:8265", token=token)
    job = jobs.submit(
        {
            "submission_id": "count-nodes",
            "entrypoint": "python -c \"import ray; ray.init(); print('nodes', len(ray.nodes()))\"",
        }
    )
    done = wait_for(
        "the job finished",
        lambda: (j := jobs.get(job.submission_id)) and j.status in ("SUCCEEDED", "FAILED") and j,
        120,
    )
    assert done.status == "SUCCEEDED", done
    request = urllib.request.Request(
        f"http://{head['status']['podIP']}:8265/api/jobs/count-nodes/logs",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        job_logs = json.loads(answer.read())["logs"]
    assert "nodes 2" in job_logs, job_logs  # the worker Pod's raylet joined the head's
    # Without the token the cluster refuses the job API (KubeRay's authOptions, Ray's token mode).
    with pytest.raises(RayAuthError):
        RayJobClient(f"http://{head['status']['podIP']}:8265").get("count-nodes")

    # A deleted Ray pod goes in seconds: its preStop hook stops Ray, so `ray start --block` and the
    # container end (bash, the first process, would otherwise hold it its 30 s grace period).
    (worker,) = [p["metadata"]["name"] for p in pods if p["metadata"]["labels"]["ray.io/group"] == "rollouts"]
    deleting = time.monotonic()
    control_plane.kubectl_run("delete", "pod", worker, "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    deleted_s = time.monotonic() - deleting
    print(f"a Ray worker pod deleted in {deleted_s:.1f} s")
    assert deleted_s < 20, f"the pod took {deleted_s:.0f} s to go: its preStop hook did not stop Ray"
