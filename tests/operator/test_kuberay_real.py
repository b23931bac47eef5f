"""What KubeRay's own operator makes of the RayClusters ours builds (no node: the Pods it creates
stay Pending, which is enough to read what it made).

KubeRay is the binary ``make kuberay`` builds from its Go module, watching only this module's
namespace (the API-level tests beside it run the process stand-in on the same control plane).
Each test here failed with real KubeRay before the change it covers: a dotted experiment name
(KubeRay refuses the cluster: ``InvalidRayClusterMetadata``), the dashboard port setting (KubeRay
reports the port while Ray listened elsewhere), the ``rayVersion`` floor (below it KubeRay probes
with ``wget``), and what its Pods carry that the stand-in's did not (``/dev/shm``, the
``wait-gcs-ready`` init container, the headless head Service).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from rltrainer_operator.builders.raycluster import build_raycluster
from rltrainer_operator.settings import Settings
from rltrainer_operator.testing import parts
from rltrainer_operator.testing.kuberay import KubeRayOperator
from rltrainer_operator.validation import validate_experiment
from tests.operator.conftest import experiment_manifest

NAMESPACE = "real-kuberay"


@pytest.fixture(scope="module")
def kuberay(control_plane):
    binary = parts.find("kuberay")
    if binary is None:
        pytest.skip("KubeRay is not built: `make kuberay` (Go and the module proxy)")
    control_plane.kubectl_run("create", "namespace", NAMESPACE, check=False)
    with KubeRayOperator(control_plane, binary, namespaces=[NAMESPACE]) as started:
        yield started
    control_plane.kubectl_run("delete", "rayclusters", "--all", "-n", NAMESPACE, "--wait=false", check=False)


def cluster_for(name: str, settings: Settings | None = None, **spec: Any) -> dict[str, Any]:
    body = experiment_manifest(name, NAMESPACE, **spec)
    body["metadata"]["uid"] = str(uuid.uuid4())
    cluster = build_raycluster(body, validate_experiment(body).spec, settings or Settings())
    cluster["metadata"].pop("ownerReferences")  # no RLExperiment object owns it here
    return cluster


def create(plane, cluster: dict[str, Any]) -> dict[str, Any]:
    plane.kubectl_run("create", "-f", "-", stdin=json.dumps(cluster))
    return cluster


def kuberay_made(plane, kuberay: KubeRayOperator, name: str, timeout_s: float = 60) -> dict[str, Any]:
    """The head Pod, worker Pods, head Service and RayCluster status KubeRay made for ``name``;
    fails at once, quoting KubeRay, when it refused the cluster (a Warning event on it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = plane.kubectl_json(
            "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )["items"]
        refused = [f"{e['reason']}: {e['message']}" for e in events if e["type"] == "Warning"]
        assert not refused, f"KubeRay refused RayCluster {name}: {refused}"
        pods = plane.kubectl_json(
            "get", "pods", "-n", NAMESPACE, "-l", f"ray.io/cluster={name}", "-o", "json"
        )
        services = plane.kubectl_json(
            "get", "services", "-n", NAMESPACE, "-l", f"ray.io/cluster={name}", "-o", "json"
        )
        cluster = plane.kubectl_json("get", "raycluster", name, "-n", NAMESPACE, "-o", "json")
        heads = [p for p in pods["items"] if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        workers = [p for p in pods["items"] if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        wanted = sum(g["replicas"] for g in cluster["spec"]["workerGroupSpecs"])
        endpoints = (cluster.get("status") or {}).get("endpoints")
        if heads and len(workers) == wanted and services["items"] and endpoints:
            return {"head": heads[0], "workers": workers, "service": services["items"][0], "cluster": cluster}
        assert time.monotonic() < deadline, f"KubeRay made no Pods for {name}:\n{kuberay.log_tail()}"
        time.sleep(0.5)


def ray_container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def test_a_dotted_experiment_name_becomes_a_cluster_kuberay_accepts(control_plane, kuberay):
    """``ppo.cartpole`` is a valid RLExperiment name; ``rlx-ppo.cartpole`` is no DNS-1035 label
    and KubeRay only records ``InvalidRayClusterMetadata``. The operator maps it instead."""
    cluster = create(control_plane, cluster_for("ppo.cartpole", rollouts={"replicas": 1}))
    name = cluster["metadata"]["name"]
    assert name.startswith("rlx-ppo-cartpole-") and "." not in name
    made = kuberay_made(control_plane, kuberay, name)
    assert made["service"]["metadata"]["name"] == f"{name}-head-svc"
    assert made["head"]["metadata"]["labels"]["rltrainer.io/experiment"] == "ppo.cartpole"


def test_the_dashboard_port_setting_moves_ray_and_kuberays_endpoint_together(control_plane, kuberay):
    """KubeRay copies the head's port named ``dashboard`` into the Service and
    ``status.endpoints.dashboard``, which the operator dials: Ray must listen there too."""
    cluster = create(
        control_plane, cluster_for("dashboard", Settings(dashboard_port=8266), rollouts={"replicas": 0})
    )
    made = kuberay_made(control_plane, kuberay, cluster["metadata"]["name"])
    assert made["cluster"]["status"]["endpoints"]["dashboard"] == "8266"
    ports = {p["name"]: p["targetPort"] for p in made["service"]["spec"]["ports"]}
    assert ports["dashboard"] == 8266
    command = " ".join(ray_container(made["head"])["args"])
    assert "ray start --head" in command and "--dashboard-port=8266" in command, command


@pytest.mark.parametrize(("ray_version", "probe"), [("2.52.0", "exec"), ("2.53.0", "httpGet")])
def test_the_ray_version_floor_is_where_kuberay_stops_probing_with_wget(
    control_plane, kuberay, ray_version, probe
):
    """Below 2.53 KubeRay probes with ``wget`` (the trainer image has none): the operator refuses
    those versions (``validation.RAY_VERSION_FLOOR``); from 2.53 KubeRay asks over HTTP."""
    cluster = cluster_for(f"ray-{ray_version.replace('.', '-')}", rollouts={"replicas": 0})
    cluster["spec"]["rayVersion"] = ray_version  # as the operator built it before the floor
    cluster["spec"].pop("authOptions")  # token mode needs 2.52 in KubeRay's own validation
    create(control_plane, cluster)
    head = kuberay_made(control_plane, kuberay, cluster["metadata"]["name"])["head"]
    readiness = ray_container(head)["readinessProbe"]
    assert probe in readiness, readiness
    if probe == "exec":
        assert "wget" in " ".join(readiness["exec"]["command"])
    from rltrainer_operator.validation import RAY_VERSION_FLOOR

    assert (tuple(map(int, ray_version.split("."))) >= RAY_VERSION_FLOOR) == (probe == "httpGet")


def test_kuberays_pods_carry_shared_memory_an_init_container_and_the_head_by_name(control_plane, kuberay):
    """What real KubeRay adds to our templates: ``/dev/shm`` in memory sized to the memory limit
    (Ray's object store, counted against it), the workers' ``wait-gcs-ready`` init container with
    the Ray container's environment and security context, the head's address as the headless
    Service's DNS name, our pod labels kept."""
    cluster = create(control_plane, cluster_for("shapes", learners={"replicas": 0}, rollouts={"replicas": 1}))
    name = cluster["metadata"]["name"]
    made = kuberay_made(control_plane, kuberay, name)
    for pod in [made["head"], *made["workers"]]:
        container = ray_container(pod)
        (shm,) = [v for v in pod["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        assert shm["emptyDir"]["sizeLimit"] == container["resources"]["limits"]["memory"]
        assert {"name": shm["name"], "mountPath": "/dev/shm"}.items() <= next(
            m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"
        ).items()
    # The templates' labels stay; KubeRay's app.kubernetes.io/name only where a template has none.
    assert made["head"]["metadata"]["labels"]["app.kubernetes.io/name"] == "rltrainer"
    (worker,) = made["workers"]
    assert worker["metadata"]["labels"]["rltrainer.io/group"] == "rollouts"
    assert worker["metadata"]["labels"]["app.kubernetes.io/name"] == "kuberay"
    (init,) = worker["spec"]["initContainers"]
    assert init["name"] == "wait-gcs-ready"
    assert init["securityContext"] == ray_container(worker)["securityContext"]
    head_address = f"{name}-head-svc.{NAMESPACE}.svc.cluster.local"
    assert {"name": "FQ_RAY_IP", "value": head_address} in init["env"]
    assert f"--address={head_address}:6379" in " ".join(ray_container(worker)["args"])
    service = made["service"]["spec"]
    assert service["clusterIP"] == "None" and service.get("publishNotReadyAddresses") is True
