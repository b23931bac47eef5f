"""The KubeRay ``RayCluster`` (``ray.io/v1``) that runs one experiment.

Shape: a head (runs the driver; the learner too when ``learners.replicas`` is 0), a
``learners`` worker group (one pod per learner, GPUs requested as ``nvidia.com/gpu``) and a
``rollouts`` worker group (one pod per env runner). Each worker group advertises a custom Ray
resource (``rltrainer_learner`` / ``rltrainer_rollout``) that the driver's placement-group
bundles ask for, so learners and env runners land on their own groups (rltrainer's
``custom_resources_per_*`` convention, see the README).

A sweep (``sweep.is_sweep``) is sized by ``cluster_shape`` for the trials that run at once.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from typing import Any

from rltrainer_operator.builders.naming import (
    NO_HEAD_RESTART_ANNOTATION,
    labels,
    ray_token_secret_name,
    raycluster_name,
)
from rltrainer_operator.models import GROUP, KIND, VERSION, ExperimentSpec, Toleration
from rltrainer_operator.queueing import kueue_labels
from rltrainer_operator.settings import Settings
from rltrainer_operator.sweep import concurrency, driver_cpus, is_sweep

LEARNER_RESOURCE = "rltrainer_learner"
ROLLOUT_RESOURCE = "rltrainer_rollout"
GPU_RESOURCE = "nvidia.com/gpu"
LEARNERS_GROUP = "learners"
ROLLOUTS_GROUP = "rollouts"

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


def cpu_count(quantity: str) -> int:
    """A CPU quantity as the whole number Ray's ``num-cpus`` needs (``"500m"`` -> 1, ``"2"`` -> 2)."""
    match = _QUANTITY.match(quantity)
    if match is None:
        raise ValueError(f"not a CPU quantity: {quantity!r}")
    value = float(match.group(1)) / (1000 if match.group(2) == "m" else 1)
    return max(1, math.ceil(value))


def cpu_quantity(cpus: float) -> str:
    """CPUs as a Kubernetes quantity: whole ones as they are (``2``), fractions in millicores."""
    return str(int(cpus)) if float(cpus).is_integer() else f"{max(1, round(cpus * 1000))}m"


def ray_resources(resources: dict[str, float]) -> str:
    """KubeRay's ``rayStartParams.resources`` format: a JSON object in a quoted string."""
    return json.dumps(json.dumps(resources, sort_keys=True))


@dataclasses.dataclass(frozen=True)
class ClusterShape:
    """Pods and Ray CPUs of an experiment's RayCluster."""

    learners: int
    """Learner pods."""
    rollouts: int
    """Rollout pods."""
    head_cpus: int
    """The head's Ray ``num-cpus`` (and its pod's CPU request when that is more than ``head.cpu``)."""


def cluster_shape(spec: ExperimentSpec) -> ClusterShape:
    """What the experiment runs on.

    One run: ``learners.replicas`` learner pods, ``rollouts.replicas`` rollout pods, ``head.cpu``
    CPUs on the head (the driver is the job itself and reserves nothing).

    A sweep runs up to ``sweep.concurrency(spec)`` trials at once (``tune.maxConcurrentTrials``,
    else every trial: the grid's combinations times ``tune.numSamples``), and Tune reserves one
    placement group per running trial: a driver bundle of ``num_cpus_for_main_process`` CPUs
    (default 1; the trial's learner too when ``learners.replicas`` is 0), then
    ``learners.replicas`` learner bundles and ``rollouts.replicas`` env-runner bundles, each
    asking for its group's custom resource, of which each worker pod advertises one. So each
    worker group gets ``replicas x concurrency`` pods of the size the spec gives, and the head,
    where no other bundle fits (every worker pod's CPUs go to its own bundle), advertises
    ``max(head.cpu, concurrency x num_cpus_for_main_process)`` CPUs and requests as many.
    """
    head_cpus = cpu_count(spec.head.cpu)
    if not is_sweep(spec):
        return ClusterShape(spec.learners.replicas, spec.rollouts.replicas, head_cpus)
    trials = concurrency(spec)
    return ClusterShape(
        learners=spec.learners.replicas * trials,
        rollouts=spec.rollouts.replicas * trials,
        head_cpus=max(head_cpus, trials * driver_cpus(spec)),
    )


def owner_reference(experiment: dict[str, Any]) -> dict[str, Any]:
    """Makes the RayCluster owned by (and garbage-collected with) the RLExperiment."""
    meta = experiment["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_raycluster(experiment: dict[str, Any], spec: ExperimentSpec, settings: Settings) -> dict[str, Any]:
    """The RayCluster for ``experiment`` (its body, for owner/labels) with parsed ``spec``."""
    meta = experiment["metadata"]
    name = meta["name"]
    extra_labels = kueue_labels(meta.get("labels"))  # Kueue admits the RayCluster as one workload
    image = spec.image or settings.default_image
    env = pod_env(spec, settings)
    shape = cluster_shape(spec)
    head_cpu = spec.head.cpu if shape.head_cpus <= cpu_count(spec.head.cpu) else str(shape.head_cpus)
    groups = [
        worker_group(
            LEARNERS_GROUP,
            replicas=shape.learners,
            image=image,
            env=env,
            cpus=spec.learners.cpusPerLearner,
            gpus=spec.learners.gpusPerLearner,
            memory=spec.learners.memory,
            custom_resource=LEARNER_RESOURCE,
            node_selector=spec.learners.nodeSelector,
            tolerations=spec.learners.tolerations,
            service_account=spec.storage.serviceAccountName,
            grace_period_s=spec.preemption.gracePeriodSeconds,
        ),
        worker_group(
            ROLLOUTS_GROUP,
            replicas=shape.rollouts,
            image=image,
            env=env,
            cpus=spec.rollouts.cpusPerRunner,
            gpus=0,
            memory=spec.rollouts.memory,
            custom_resource=ROLLOUT_RESOURCE,
            node_selector=spec.rollouts.nodeSelector,
            tolerations=spec.rollouts.tolerations,
            service_account=spec.storage.serviceAccountName,
            grace_period_s=spec.preemption.gracePeriodSeconds,
        ),
    ]
    cluster = raycluster_name(name)
    auth = {}
    if spec.rayAuth.mode == "token":
        # KubeRay passes the Secret's auth_token to every Ray container as RAY_AUTH_TOKEN
        # (and sets RAY_AUTH_MODE=token); without authOptions, auth is off.
        auth["authOptions"] = {"mode": "token", "secretName": ray_token_secret_name(cluster)}
    raycluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": cluster,
            "namespace": meta["namespace"],
            "labels": labels(name, extra_labels),
            "annotations": {NO_HEAD_RESTART_ANNOTATION: "true"},
            "ownerReferences": [owner_reference(experiment)],
        },
        "spec": {
            "rayVersion": spec.rayVersion,
            **auth,
            "headGroupSpec": {
                "rayStartParams": {
                    "dashboard-host": "0.0.0.0",
                    # Ray listens where the head's port named "dashboard" says (KubeRay copies
                    # that port into the head Service and status.endpoints, which the operator
                    # dials): the chart's operator.dashboardPort moves both.
                    "dashboard-port": str(settings.dashboard_port),
                    "num-cpus": str(shape.head_cpus),
                },
                "template": pod_template(
                    "ray-head",
                    image=image,
                    env=env,
                    requests={"cpu": head_cpu, "memory": spec.head.memory},
                    ports=[
                        {"containerPort": 6379, "name": "gcs-server"},
                        {"containerPort": settings.dashboard_port, "name": "dashboard"},
                        {"containerPort": 10001, "name": "client"},
                    ],
                    node_selector=spec.head.nodeSelector,
                    tolerations=spec.head.tolerations,
                    service_account=spec.storage.serviceAccountName,
                    pod_labels=labels(name, extra_labels),
                    grace_period_s=spec.preemption.gracePeriodSeconds,
                ),
            },
            # A group with 0 replicas is kept so that scaling it up later is a plain replicas patch.
            "workerGroupSpecs": groups,
        },
    }
    if spec.imagePullPolicy:
        templates = [raycluster["spec"]["headGroupSpec"]["template"]] + [g["template"] for g in groups]
        for template in templates:
            for container in template["spec"]["containers"]:
                container["imagePullPolicy"] = spec.imagePullPolicy
    return raycluster


def worker_group(
    group: str,
    *,
    replicas: int,
    image: str,
    env: list[dict[str, Any]],
    cpus: float,
    gpus: int,
    memory: str,
    custom_resource: str,
    node_selector: dict[str, str],
    tolerations: list[Toleration],
    service_account: str | None,
    grace_period_s: int,
) -> dict[str, Any]:
    """One worker group: ``replicas`` pods, each advertising one unit of ``custom_resource``."""
    quantity = cpu_quantity(cpus)
    params = {"num-cpus": str(cpu_count(quantity)), "resources": ray_resources({custom_resource: 1})}
    requests: dict[str, Any] = {"cpu": quantity, "memory": memory}
    if gpus:
        params["num-gpus"] = str(gpus)
        requests[GPU_RESOURCE] = str(gpus)
    return {
        "groupName": group,
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "rayStartParams": params,
        "template": pod_template(
            "ray-worker",
            image=image,
            env=env,
            requests=requests,
            ports=[],
            node_selector=node_selector,
            tolerations=tolerations,
            service_account=service_account,
            pod_labels={"rltrainer.io/group": group},
            grace_period_s=grace_period_s,
        ),
    }


def pod_template(
    container: str,
    *,
    image: str,
    env: list[dict[str, Any]],
    requests: dict[str, Any],
    ports: list[dict[str, Any]],
    node_selector: dict[str, str],
    tolerations: list[Toleration],
    service_account: str | None,
    pod_labels: dict[str, str],
    grace_period_s: int,
) -> dict[str, Any]:
    """A Ray pod: requests equal limits (Guaranteed QoS, as KubeRay recommends for Ray pods)."""
    head = container == "ray-head"
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_period_s,
        "containers": [
            {
                "name": container,
                "image": image,
                "env": copy.deepcopy(env),
                "resources": {"requests": dict(requests), "limits": dict(requests)},
                # A crash's last log lines become the container's termination message, which the
                # operator quotes in the experiment's condition (pod_problems).
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "lifecycle": {"preStop": {"exec": {"command": pre_stop_command(grace_period_s, head)}}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                **({"ports": ports} if ports else {}),
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in tolerations]
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"metadata": {"labels": dict(pod_labels)}, "spec": spec}


#: Seconds of a pod's grace period kept for ``ray stop`` after the driver's checkpoint.
RAY_STOP_RESERVE_S = 5
#: How long a worker pod's hook waits for the head's request (the whole cluster going at once).
WORKER_FOLLOW_S = 5


def pre_stop_command(grace_period_s: int, head: bool) -> list[str]:
    """A Ray container's preStop hook (``rltrainer.preemption``), then ``ray stop``.

    The head's asks the experiment's driver for a checkpoint and waits until it is written (at
    once when no driver runs). A worker's asks nothing: when the whole cluster goes (Kueue's
    preemption, the head's node drained) it waits for the head's request and the checkpoint,
    serving the iteration in flight; alone (a rollout or learner pod lost), it goes after
    ``WORKER_FOLLOW_S`` and the running job replaces it. KubeRay's command runs Ray under ``bash
    -c`` as the first process, which ignores SIGTERM: without ``ray stop`` a deleted Ray pod
    lingers its whole grace period, delaying every restart (Ray's KubeRay guide recommends that
    hook). The kubelet sends SIGTERM only after the hook, and kills the container when the grace
    period ends, hook or not."""
    wait_s = max(1, grace_period_s - RAY_STOP_RESERVE_S)
    role = "" if head else f" --follow {WORKER_FOLLOW_S}"
    return [
        "/bin/sh",
        "-c",
        f"python -m rltrainer.preemption hook --timeout {wait_s} --reason pod-terminating{role}; ray stop",
    ]


def pod_env(spec: ExperimentSpec, settings: Settings) -> list[dict[str, Any]]:
    """Environment of every Ray pod: where S3 is, and credentials by reference (never by value)."""
    env: list[dict[str, Any]] = []
    options = settings.s3_options(spec.storage)
    if "endpoint_url" in options:
        env.append({"name": "AWS_ENDPOINT_URL", "value": options["endpoint_url"]})
    if "region_name" in options:
        env.append({"name": "AWS_DEFAULT_REGION", "value": options["region_name"]})
    secret = spec.storage.credentialsSecretRef
    if secret is not None:
        for name, key in (
            ("AWS_ACCESS_KEY_ID", secret.accessKeyIdKey),
            ("AWS_SECRET_ACCESS_KEY", secret.secretAccessKeyKey),
        ):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": key}}})
    return env


def worker_replicas(raycluster: dict[str, Any]) -> dict[str, int]:
    """``{group name: replicas}`` of a RayCluster's worker groups."""
    return {g["groupName"]: g.get("replicas", 0) for g in raycluster["spec"].get("workerGroupSpecs", [])}


def scale_patch(raycluster: dict[str, Any], group: str, replicas: int) -> dict[str, Any]:
    """A merge patch setting one worker group's replicas (lists are replaced whole by merge patches)."""
    groups = []
    for g in raycluster["spec"]["workerGroupSpecs"]:
        g = dict(g)
        if g["groupName"] == group:
            g.update(replicas=replicas, minReplicas=replicas, maxReplicas=replicas)
        groups.append(g)
    return {"spec": {"workerGroupSpecs": groups}}
