"""The local KubeRay on its own (no operator): RayClusters become real local Ray clusters.

What it shows: a RayCluster written by hand becomes ready with a working job API; a job sees
the worker groups' custom resources and each pod's environment (plain values and Secrets);
killed workers come back; worker groups scale; a lost head stays lost under KubeRay's
``disable-provisioned-head-restart`` annotation and comes back without it; suspend stops every
process and resume brings the cluster back; two clusters of the same name in two namespaces
run side by side; deleting a RayCluster (or closing the harness) leaves no process behind.
"""

from __future__ import annotations

import base64
import collections
import json
import shlex
import sys
import time
import types
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from rltrainer_operator.ray_jobs import RayJobClient
from rltrainer_operator.testing.local_kuberay import Pod, _desired_replicas, parse_resources
from rltrainer_operator.testing.local_stack import LocalStack
from tests.e2e.helpers import MERGE, condition, get_raycluster, wait_for, wait_ready

# What a job on the cluster reports: resources, the head's env, and a rollout worker's env.
PROBE = """
import json, os, ray
ray.init()
@ray.remote(num_cpus=0, resources={"rltrainer_rollout": 0.01})
def on_rollout_node():
    return {"plain": os.environ.get("PLAIN"), "secret": os.environ.get("SECRET_VALUE")}
print("PROBE " + json.dumps({
    "resources": ray.cluster_resources(),
    "head_env": {"plain": os.environ.get("PLAIN"), "secret": os.environ.get("SECRET_VALUE"),
                 "aws": os.environ.get("AWS_SECRET_ACCESS_KEY")},
    "rollout_env": ray.get(on_rollout_node.remote(), timeout=60),
}))
"""


def raycluster(name: str, namespace: str, *, rollouts: int = 2, learners: int = 0, annotate: bool = True):
    env = [
        {"name": "PLAIN", "value": f"plain-{namespace}"},
        {"name": "SECRET_VALUE", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
    ]

    def template(container: str) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.60.0", "env": env}]}}

    def group(group_name: str, replicas: int, resource: str, **params: str) -> dict[str, Any]:
        return {
            "groupName": group_name,
            "replicas": replicas,
            "minReplicas": 0,
            "maxReplicas": 4,
            # KubeRay's shell-quoted JSON, exactly as the operator writes it.
            "rayStartParams": {"num-cpus": "1", "resources": json.dumps(json.dumps({resource: 1})), **params},
            "template": template("ray-worker"),
        }

    groups = [group("rollouts", rollouts, "rltrainer_rollout")]
    if learners:
        groups.append(group("learners", learners, "rltrainer_learner", **{"num-gpus": "1"}))
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"ray.io/disable-provisioned-head-restart": "true"} if annotate else {},
        },
        "spec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "1"},
                "template": template("ray-head"),
            },
            "workerGroupSpecs": groups,
        },
    }


@pytest.fixture(scope="module")
def stack():
    """A real control plane with the CRDs, and a local KubeRay watching it."""
    local = LocalStack().start()
    kuberay = local.kuberay
    try:
        core = kubernetes.client.CoreV1Api(local.api_client)
        for namespace in ("team-a", "team-b"):
            core.create_namespace({"metadata": {"name": namespace}})
            token = base64.b64encode(f"secret-{namespace}".encode()).decode()
            secret = {"metadata": {"name": "creds"}, "data": {"token": token}}
            core.create_namespaced_secret(namespace, secret)
        yield kubernetes.client.CustomObjectsApi(local.api_client), kuberay
    finally:
        local.stop()
    assert not kuberay.processes(), "close() left processes behind"
    assert not kuberay.errors, kuberay.errors


def dashboard(obj: dict[str, Any]) -> str:
    status = obj["status"]
    return f"http://{status['head']['serviceIP']}:{status['endpoints']['dashboard']}"


def run_probe(obj: dict[str, Any], submission_id: str) -> dict[str, Any]:
    """Run PROBE through Ray's job API; its report."""
    jobs = RayJobClient(dashboard(obj), timeout_s=30)
    entrypoint = f"{shlex.quote(sys.executable)} -c {shlex.quote(PROBE)}"
    jobs.submit({"submission_id": submission_id, "entrypoint": entrypoint})
    job = wait_for(
        f"job {submission_id} to finish", lambda: (j := jobs.get(submission_id)) and j.finished and j, 120
    )
    with urllib.request.urlopen(f"{dashboard(obj)}/api/jobs/{submission_id}/logs", timeout=30) as response:
        logs = json.loads(response.read())["logs"]
    assert job.status == "SUCCEEDED", f"{job.status}: {job.message}\n{logs}"
    line = next(line for line in logs.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def node_states(obj: dict[str, Any]) -> dict[str, int]:
    """``{state: count}`` of the nodes in Ray's state API (the GCS's view, which lags a pod's death
    by a few seconds, more on a loaded machine)."""
    with urllib.request.urlopen(f"{dashboard(obj)}/api/v0/nodes?limit=100", timeout=30) as response:
        nodes = json.loads(response.read())["data"]["result"]["result"]
    return dict(collections.Counter(node["state"] for node in nodes))


def patch_spec(custom: Any, namespace: str, name: str, spec: dict[str, Any]) -> None:
    custom.patch_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", name, {"spec": spec}, _content_type=MERGE
    )


def set_rollouts(custom: Any, namespace: str, name: str, replicas: int) -> None:
    obj = get_raycluster(custom, namespace, name)
    groups = obj["spec"]["workerGroupSpecs"]
    for group in groups:
        if group["groupName"] == "rollouts":
            group["replicas"] = replicas
    patch_spec(custom, namespace, name, {"workerGroupSpecs": groups})


@pytest.mark.in_make_test
def test_resources_parse_both_kuberay_and_plain_json():
    assert parse_resources('"{\\"rltrainer_rollout\\": 1}"') == {"rltrainer_rollout": 1.0}
    assert parse_resources('\'"{\\"a\\": 2}"\'') == {"a": 2.0}
    assert parse_resources('{"a": 1, "b": 0.5}') == {"a": 1.0, "b": 0.5}
    assert parse_resources({"a": 3}) == {"a": 3.0}
    with pytest.raises(ValueError):
        parse_resources("[1]")


@pytest.mark.in_make_test
def test_desired_replicas_are_clamped_like_kuberay():
    assert _desired_replicas({"replicas": 5, "minReplicas": 0, "maxReplicas": 3}) == 3
    assert _desired_replicas({"replicas": 0, "minReplicas": 1, "maxReplicas": 3}) == 1
    assert _desired_replicas({"replicas": 2, "suspend": True}) == 0
    assert _desired_replicas({"replicas": 2, "numOfHosts": 2}) == 4


#: What real KubeRay (v1.6.1) made of a RayCluster the operator built, recorded on real Pods
#: (``RLTRAINER_RECORD_KUBERAY=1 pytest tests/node/test_kuberay_on_pods.py``).
RECORDED = Path(__file__).resolve().parents[1] / "operator" / "data" / "kuberay_recorded"


@pytest.mark.in_make_test
def test_the_stand_ins_status_has_the_fields_real_kuberay_wrote(stack):
    """The same RayCluster, ready: the stand-in writes the status fields real KubeRay wrote, the
    same conditions (type, status, reason), head fields, endpoint names and desired resources."""
    _custom, kuberay = stack
    real = json.loads((RECORDED / "raycluster.json").read_text())
    cluster = kuberay._new_cluster(real)
    alive = types.SimpleNamespace(poll=lambda: None)  # a "process" that runs: no Ray is started
    cluster.head = Pod("head", "headgroup", alive, Path("/dev/null"), 0, ready=True)
    cluster.workers = {
        group["groupName"]: [
            Pod(f"{group['groupName']}-{i}", group["groupName"], alive, Path("/dev/null"), 0, ready=True)
            for i in range(group["replicas"])
        ]
        for group in real["spec"]["workerGroupSpecs"]
    }
    ours = kuberay._status(cluster, real)
    theirs = real["status"]
    own = {"reason", "lastUpdateTime"}  # the stand-in's notes; the patch time, set when written
    assert {k for k, v in ours.items() if v is not None} - own == set(theirs) - own
    assert {(c["type"], c["status"], c["reason"]) for c in ours["conditions"]} == {
        (c["type"], c["status"], c["reason"]) for c in theirs["conditions"]
    }
    assert set(ours["head"]) == set(theirs["head"]) and set(ours["endpoints"]) == set(theirs["endpoints"])
    for key in (
        "state",
        "desiredWorkerReplicas",
        "readyWorkerReplicas",
        "desiredCPU",
        "desiredMemory",
        "desiredGPU",
    ):
        assert ours[key] == theirs[key], key


@pytest.mark.in_make_test
def test_token_auth_gets_a_secret_like_kuberay(stack, monkeypatch):
    """``authOptions.mode: token``: a generated token in a Secret, given to every process."""
    _custom, kuberay = stack
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "this machine's, not the pod's")
    body = raycluster("authed", "team-a")
    body["metadata"]["uid"] = "not-created"  # the env a pod would get; no Ray is started
    body["spec"]["authOptions"] = {"mode": "token"}
    cluster = kuberay._new_cluster(body)
    head = kuberay._pod_env(cluster, body, body["spec"]["headGroupSpec"])
    worker = kuberay._pod_env(cluster, body, body["spec"]["workerGroupSpecs"][0])
    assert head["RAY_AUTH_MODE"] == worker["RAY_AUTH_MODE"] == "token"
    assert head["RAY_AUTH_TOKEN"] == worker["RAY_AUTH_TOKEN"]
    secret = kuberay._core.read_namespaced_secret("authed", "team-a")
    assert base64.b64decode(secret.data["auth_token"]).decode() == head["RAY_AUTH_TOKEN"]
    plain = kuberay._pod_env(cluster, raycluster("plain", "team-a"), body["spec"]["headGroupSpec"])
    assert plain["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in plain
    assert plain["SECRET_VALUE"] == "secret-team-a" and "AWS_SECRET_ACCESS_KEY" not in plain


@pytest.mark.timeout(600)
def test_cluster_lifecycle(stack):
    custom, kuberay = stack
    ns, name = "team-a", "rc"
    body = raycluster(name, ns, learners=1)
    custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    obj = wait_ready(custom, ns, name)
    status = obj["status"]
    assert status["state"] == "ready"
    assert status["head"]["serviceIP"] == "127.0.0.1"
    assert status["head"]["serviceName"] == f"{name}-head-svc"
    assert status["desiredWorkerReplicas"] == status["availableWorkerReplicas"] == 3
    assert status["observedGeneration"] == 1
    assert "learners asks for 1 GPU(s) per pod: advertised as 0" in status["reason"]
    with urllib.request.urlopen(f"{dashboard(obj)}/api/version", timeout=10) as response:
        assert json.loads(response.read())["ray_version"] == "2.60.0"

    # A job through Ray's job API sees the groups' resources and every pod's environment.
    report = run_probe(obj, "probe-1")
    resources = report["resources"]
    assert resources["rltrainer_rollout"] == 2 and resources["rltrainer_learner"] == 1
    assert resources["CPU"] == 4 and "GPU" not in resources
    assert report["head_env"] == {"plain": "plain-team-a", "secret": "secret-team-a", "aws": None}
    assert report["rollout_env"] == {"plain": "plain-team-a", "secret": "secret-team-a"}

    # A killed worker pod comes back (a new pod) and rejoins.
    killed = kuberay.kill_worker(ns, name, "rollouts")
    wait_for("the worker's restart", lambda: kuberay.restarts(ns, name).get("rollouts") == 1, 30)
    obj = wait_ready(custom, ns, name)
    assert killed not in [pod.name for pod in kuberay.pods(ns, name)["rollouts"]]
    # Four alive counted only once the killed node is dead: until Ray notices, the dead node
    # can stand in the count for the new one, whose resources are not there yet.
    wait_for(
        "Ray to drop the dead node and count the new one",
        lambda: (states := node_states(obj)).get("DEAD", 0) >= 1 and states.get("ALIVE") == 4,
        120,
    )
    assert run_probe(obj, "probe-2")["resources"]["rltrainer_rollout"] == 2

    # Live scaling: replicas 2 -> 1 removes a pod, 1 -> 2 adds one.
    set_rollouts(custom, ns, name, 1)
    wait_for("one rollout pod", lambda: len(kuberay.pods(ns, name)["rollouts"]) == 1, 30)
    obj = wait_for(
        "status with 2 desired workers",
        lambda: (o := get_raycluster(custom, ns, name))["status"].get("desiredWorkerReplicas") == 2 and o,
        30,
    )
    assert obj["status"]["observedGeneration"] == 2
    set_rollouts(custom, ns, name, 2)
    wait_ready(custom, ns, name)
    assert len(kuberay.pods(ns, name)["rollouts"]) == 2

    # The head dies: with disable-provisioned-head-restart, KubeRay leaves it dead.
    kuberay.kill_head(ns, name)
    obj = wait_for(
        "HeadPodReady False",
        lambda: condition(o := get_raycluster(custom, ns, name), "HeadPodReady")["status"] == "False" and o,
        30,
    )
    assert condition(obj, "HeadPodReady")["reason"] == "HeadPodNotFound"
    assert condition(obj, "RayClusterProvisioned")["status"] == "True"  # stays True once provisioned
    time.sleep(3)
    assert kuberay.pods(ns, name)["head"] == []
    assert condition(get_raycluster(custom, ns, name), "HeadPodReady")["status"] == "False"

    # Deleting the RayCluster stops every one of its processes.
    custom.delete_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", name)
    wait_for("no processes of the deleted cluster", lambda: not kuberay.processes(ns, name), 30)


@pytest.mark.timeout(600)
def test_side_by_side_suspend_resume_and_head_restart(stack):
    custom, kuberay = stack
    # Same name, two namespaces; "team-b" without the annotation: its head is restarted.
    for ns, annotate in (("team-a", True), ("team-b", False)):
        body = raycluster("twin", ns, rollouts=1, annotate=annotate)
        custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", body)
    a, b = wait_ready(custom, "team-a", "twin"), wait_ready(custom, "team-b", "twin")
    assert a["status"]["endpoints"]["dashboard"] != b["status"]["endpoints"]["dashboard"]
    assert set(kuberay.processes("team-a", "twin")).isdisjoint(kuberay.processes("team-b", "twin"))
    for obj, ns in ((a, "team-a"), (b, "team-b")):
        report = run_probe(obj, f"twin-{ns}")
        assert report["resources"]["rltrainer_rollout"] == 1 and report["resources"]["CPU"] == 2
        assert report["head_env"]["secret"] == f"secret-{ns}"

    # Suspend team-a: all of its processes stop; team-b does not notice.
    patch_spec(custom, "team-a", "twin", {"suspend": True})
    wait_for("team-a's processes gone", lambda: not kuberay.processes("team-a", "twin"), 30)
    obj = wait_for(
        "team-a suspended",
        lambda: (o := get_raycluster(custom, "team-a", "twin"))["status"].get("state") == "suspended" and o,
        30,
    )
    assert condition(obj, "RayClusterSuspended")["status"] == "True"
    assert condition(obj, "HeadPodReady")["status"] == "False"
    assert run_probe(b, "twin-b-2")["resources"]["rltrainer_rollout"] == 1

    # Resume: the cluster comes back (a new head: suspend deleted every pod).
    patch_spec(custom, "team-a", "twin", {"suspend": False})
    obj = wait_ready(custom, "team-a", "twin")
    assert condition(obj, "RayClusterSuspended")["status"] == "False"
    assert run_probe(obj, "twin-a-2")["resources"]["rltrainer_rollout"] == 1

    # team-b has no disable-provisioned-head-restart: a dead head is recreated, workers rejoin.
    old_head = kuberay.kill_head("team-b", "twin")
    wait_for("team-b's head restart", lambda: kuberay.restarts("team-b", "twin").get("head") == 1, 30)
    # The restart is counted before the status is written: until then it still names the old,
    # ready head (seen: a ready status naming the killed pod).
    wait_for(
        "team-b's status naming the new head",
        lambda: get_raycluster(custom, "team-b", "twin")["status"].get("head", {}).get("podName") != old_head,
        30,
    )
    obj = wait_ready(custom, "team-b", "twin")
    assert obj["status"]["head"]["podName"] != old_head
    assert obj["status"]["endpoints"] == b["status"]["endpoints"]  # the Service's address stays
    assert run_probe(obj, "twin-b-3")["resources"]["rltrainer_rollout"] == 1
    # Both are left running: closing the harness (the fixture) must stop them all.
