"""The RLExperiment state machine, driven step by step against the API stand-in.

Each ``step()`` is one reconcile, with its status written back the way the kopf handler does;
a fake clock makes backoffs and deadlines instant; a fake Ray job API plays the driver.
"""

from __future__ import annotations

import datetime
from typing import Any

import kubernetes
import pytest
from conftest import MERGE, apply, experiment_manifest, get_experiment, patch_spec, wait_for

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.kube import Kube, make_api_client
from rltrainer_operator.reconciler import Reconciler
from rltrainer_operator.settings import Settings

NAME = "cartpole"
CLUSTER = raycluster_name(NAME)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


class Operator:
    """A reconciler plus the bits of the kopf handler that write status."""

    def __init__(self, kube: Any, **settings: Any) -> None:
        self.kube = kube
        self.clock = Clock()
        self.progress: dict[tuple[str, str], dict[str, Any]] = {}
        defaults = {"provision_timeout_s": 60.0, "backoff_base_s": 10.0, "ray_token_key": "test-key"}
        self.settings = Settings(**{**defaults, **settings})
        self.ns = kube.ns
        self.api_client = make_api_client(kubeconfig=kube.kubeconfig)
        self.reconciler = Reconciler(
            Kube(self.api_client),
            self.settings,
            read_progress=lambda _spec, ns, name: self.progress.get((ns, name)),
            clock=self.clock,
        )
        self.events: list[tuple[str, str]] = []

    def step(self, name: str = NAME, write_status: bool = True) -> dict[str, Any]:
        outcome = self.reconciler.reconcile(get_experiment(self.kube, name))
        if outcome.status is not None and write_status and not outcome.deleted:
            self.kube.client.patch_namespaced_custom_object_status(
                "rltrainer.io",
                "v1alpha1",
                self.ns,
                "rlexperiments",
                name,
                {"status": outcome.status},
                _content_type=MERGE,
            )
        self.events += [(e.reason, e.message) for e in outcome.events]
        self.last_outcome = outcome
        return get_experiment(self.kube, name).get("status", {}) if not outcome.deleted else {}

    def close(self) -> None:
        self.api_client.close()


@pytest.fixture
def ns(kube):
    return kube.ns


@pytest.fixture
def op(kube):
    operator = Operator(kube)
    yield operator
    operator.close()


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def start_running(op, kuberay, **spec: Any) -> dict[str, Any]:
    apply(op.kube, experiment_manifest(**spec))
    status = op.step()
    assert status["phase"] == "Provisioning"
    kuberay.ready(op.ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Running", status
    return status


def test_provisions_runs_and_succeeds(ns, op, kube, kuberay, ray_api):
    apply(kube, experiment_manifest(config={"train_batch_size": 256}, rollouts={"replicas": 2}))
    status = op.step()
    assert status["phase"] == "Provisioning"
    assert status["rayClusterName"] == CLUSTER and status["startTime"]
    assert condition(status, "Provisioned")["status"] == "Unknown"
    cluster = kuberay.get(ns, CLUSTER)
    owner = cluster["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "RLExperiment" and owner["uid"] == get_experiment(kube)["metadata"]["uid"]
    assert cluster["metadata"]["annotations"]["ray.io/disable-provisioned-head-restart"] == "true"

    assert op.step()["phase"] == "Provisioning"  # not ready yet: nothing new
    assert op.last_outcome.status is None and len(kuberay.list(ns)) == 1

    kuberay.ready(ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "Provisioned": "True",
        "Running": "True",
        "Succeeded": "False",
        "Failed": "False",
        "Suspended": "False",
        "Restarting": "False",
        "Queued": "False",
    }
    assert status["observedGeneration"] == 1
    [submitted] = ray_api.submissions
    assert submitted["submission_id"] == status["jobId"]
    entrypoint = submitted["entrypoint"]
    assert entrypoint.startswith("rltrainer train --algo PPO --env CartPole-v1")
    assert f"--storage-path s3://checkpoints/rl/{ns} --name cartpole" in entrypoint
    assert "--resume" in entrypoint and "--resume-from" not in entrypoint
    assert '"num_env_runners":2' in entrypoint and '"train_batch_size":256' in entrypoint

    op.progress[(ns, NAME)] = {
        "iteration": 3,
        "timesteps": 12000,
        "episode_return_mean": 87.5,
        "last_checkpoint": "s3://checkpoints/rl/ml/cartpole/t/checkpoint_000003",
    }
    status = op.step()
    assert (status["iteration"], status["timesteps"], status["episodeReturnMean"]) == (3, 12000, 87.5)
    assert status["lastCheckpoint"].endswith("checkpoint_000003")

    ray_api.set(status["jobId"], "SUCCEEDED")
    status = op.step()
    assert status["phase"] == "Succeeded" and status["completionTime"]
    assert condition(status, "Succeeded")["status"] == "True"
    assert condition(status, "Ready")["status"] == "False"
    assert kuberay.deleted(ns, CLUSTER)  # shutdownAfterFinish
    assert [reason for reason, _ in op.events] == ["Provisioning", "JobSubmitted", "JobSucceeded"]
    assert op.step()["phase"] == "Succeeded" and op.last_outcome.status is None


def test_a_driver_that_cannot_use_its_s3_folder_says_so_in_its_own_reason(op, kuberay, ray_api):
    """The driver refuses its S3 storage_path at build() (check_storage_path): the experiment's
    condition is StorageUnusable, its message the driver's line naming the bucket and the call."""
    status = start_running(op, kuberay)
    line = (
        "rltrainer: error: storage_path 's3://checkpoints/rl/ml' cannot be used: cannot write "
        "s3://checkpoints/rl/ml/.rltrainer_probe_1: PutObject: AccessDenied: Access Denied."
    )
    ray_api.set(status["jobId"], "FAILED", f"Job entrypoint command failed with exit code 2\n{line}")
    status = op.step()
    assert status["phase"] == "Restarting"
    restarting = condition(status, "Restarting")
    assert restarting["reason"] == "StorageUnusable"
    assert (
        "s3://checkpoints/rl/ml" in restarting["message"]
        and "PutObject: AccessDenied" in restarting["message"]
    )


def test_failed_job_restarts_from_the_newest_checkpoint(ns, op, kuberay, ray_api):
    status = start_running(op, kuberay)
    cluster_uid = kuberay.get(ns, CLUSTER)["metadata"]["uid"]
    newest = "s3://checkpoints/rl/ml/cartpole/trial/checkpoint_000007"
    op.progress[(ns, NAME)] = {"iteration": 7, "last_checkpoint": newest}
    ray_api.set(status["jobId"], "FAILED", "Traceback ...\nRuntimeError: NaN in loss")
    status = op.step()
    assert status["phase"] == "Restarting" and status["restarts"] == 1
    assert condition(status, "Restarting")["reason"] == "JobFailed"
    assert "RuntimeError: NaN in loss" in condition(status, "Restarting")["message"]
    assert status["nextAttemptTime"] == "2026-01-01T00:00:10Z"  # backoff_base_s

    assert op.step()["phase"] == "Restarting"  # backing off
    op.clock.advance(10)
    status = op.step()
    assert status["phase"] == "Running" and status["restarts"] == 1
    assert kuberay.get(ns, CLUSTER)["metadata"]["uid"] == cluster_uid  # the healthy cluster is reused
    first, second = ray_api.submissions
    assert first["submission_id"] != second["submission_id"] == status["jobId"]
    assert f"--resume --checkpoint-at-end --resume-from {newest}" in second["entrypoint"]

    ray_api.set(status["jobId"], "SUCCEEDED")
    assert op.step()["phase"] == "Succeeded"


def test_backoff_limit_exhausted_fails(ns, op, kuberay, ray_api):
    status = start_running(op, kuberay, faultTolerance={"backoffLimit": 1})
    ray_api.set(status["jobId"], "FAILED", "boom")
    assert op.step()["phase"] == "Restarting"
    op.clock.advance(10)
    status = op.step()
    assert status["phase"] == "Running"
    ray_api.set(status["jobId"], "FAILED", "boom again")
    status = op.step()
    assert status["phase"] == "Failed" and status["restarts"] == 1
    failed = condition(status, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "BackoffLimitExceeded"
    assert "boom again" in failed["message"]
    assert kuberay.deleted(ns, CLUSTER) and status["completionTime"]
    op.clock.advance(3600)
    assert op.step()["phase"] == "Failed" and op.last_outcome.status is None  # no retry loop


def test_backoff_doubles_and_is_capped(kube, kuberay, ray_api):
    op = Operator(kube, backoff_base_s=10.0, backoff_max_s=25.0)
    try:
        status = start_running(op, kuberay, faultTolerance={"backoffLimit": 5})
        delays = []
        for _ in range(3):
            ray_api.set(status["jobId"], "FAILED")
            status = op.step()
            due = datetime.datetime.strptime(status["nextAttemptTime"], "%Y-%m-%dT%H:%M:%SZ")
            delays.append((due.replace(tzinfo=datetime.UTC) - op.clock.now).total_seconds())
            op.clock.advance(delays[-1])
            status = op.step()
            assert status["phase"] == "Running"
        assert delays == [10, 20, 25]
    finally:
        op.close()


def test_stuck_provisioning_restarts_then_fails(ns, op, kube, kuberay):
    apply(kube, experiment_manifest(faultTolerance={"backoffLimit": 1}))
    assert op.step()["phase"] == "Provisioning"
    first_uid = kuberay.get(ns, CLUSTER)["metadata"]["uid"]
    op.clock.advance(30)
    assert op.step()["phase"] == "Provisioning"
    op.clock.advance(31)
    status = op.step()
    assert (
        status["phase"] == "Restarting" and condition(status, "Restarting")["reason"] == "ProvisioningTimeout"
    )
    assert kuberay.deleted(ns, CLUSTER)  # the stuck cluster is deleted
    assert kuberay.deleted(ns, CLUSTER, wait_s=30)  # ... and the garbage collector let it go
    op.clock.advance(10)
    status = op.step()
    assert status["phase"] == "Provisioning"
    assert kuberay.get(ns, CLUSTER)["metadata"]["uid"] != first_uid  # a fresh cluster
    op.clock.advance(61)
    status = op.step()
    assert status["phase"] == "Failed"
    assert condition(status, "Failed")["reason"] == "BackoffLimitExceeded"
    assert "not ready after" in condition(status, "Failed")["message"]


def test_lost_head_recreates_the_cluster_and_resumes(ns, op, kuberay, ray_api):
    start_running(op, kuberay)
    newest = "s3://checkpoints/rl/ml/cartpole/trial/checkpoint_000004"
    op.progress[(ns, NAME)] = {"iteration": 4, "last_checkpoint": newest}
    kuberay.lose_head(ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Restarting" and condition(status, "Restarting")["reason"] == "ClusterLost"
    assert kuberay.deleted(ns, CLUSTER)
    assert kuberay.deleted(ns, CLUSTER, wait_s=30)
    op.clock.advance(10)
    assert op.step()["phase"] == "Provisioning"
    kuberay.ready(ns, CLUSTER)
    ray_api.forget_all()
    status = op.step()
    assert status["phase"] == "Running" and status["restarts"] == 1
    assert ray_api.submissions[-1]["entrypoint"].endswith(f"--resume-from {newest}")


def test_suspend_stops_everything_and_resume_continues(ns, op, kube, kuberay, ray_api):
    status = start_running(op, kuberay)
    job = status["jobId"]
    patch_spec(kube, {"suspend": True})
    status = op.step()
    assert status["phase"] == "Suspended" and condition(status, "Suspended")["status"] == "True"
    assert ray_api.stopped == [job] and kuberay.deleted(ns, CLUSTER)
    assert status["observedGeneration"] == 2
    op.clock.advance(3600)
    assert op.step()["phase"] == "Suspended"
    assert kuberay.deleted(ns, CLUSTER, wait_s=30)

    patch_spec(kube, {"suspend": False})
    status = op.step()
    assert status["phase"] == "Provisioning" and status["restarts"] == 0
    assert condition(status, "Suspended")["status"] == "False"
    kuberay.ready(ns, CLUSTER)
    assert op.step()["phase"] == "Running"


def test_scaling_rollouts_updates_the_cluster_live(ns, op, kube, kuberay, ray_api):
    status = start_running(op, kuberay)
    old_job = status["jobId"]
    patch_spec(kube, {"rollouts": {"replicas": 4}})
    status = op.step()
    groups = {g["groupName"]: g for g in kuberay.get(ns, CLUSTER)["spec"]["workerGroupSpecs"]}
    assert groups["rollouts"]["replicas"] == groups["rollouts"]["maxReplicas"] == 4
    assert groups["learners"]["replicas"] == 1
    assert status["phase"] == "Running" and status["restarts"] == 0
    assert ray_api.stopped == [old_job] and status["jobId"] != old_job
    assert '"num_env_runners":4' in ray_api.submissions[-1]["entrypoint"]
    assert ("Rescaled", "rollouts scaled from 2 to 4 replicas") in op.events


def test_deadline_exceeded_fails(ns, op, kuberay, ray_api):
    status = start_running(op, kuberay, activeDeadlineSeconds=100)
    op.clock.advance(101)
    status = op.step()
    assert status["phase"] == "Failed" and condition(status, "Failed")["reason"] == "DeadlineExceeded"
    assert ray_api.stopped and kuberay.deleted(ns, CLUSTER)


def test_invalid_spec_fails_once_and_recovers_when_fixed(ns, op, kube, kuberay):
    apply(kube, experiment_manifest(config={"train_batch_sise": 256}))
    status = op.step()
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["reason"] == "InvalidSpec" and "train_batch_sise" in failed["message"]
    assert kuberay.list(ns) == []
    assert op.step()["phase"] == "Failed" and op.last_outcome.status is None
    assert len(op.events) == 1  # no retry loop, no event storm

    patch_spec(kube, {"config": {"train_batch_sise": None, "train_batch_size": 256}})
    status = op.step()
    assert status["phase"] == "Provisioning" and status["observedGeneration"] == 2


def test_ttl_after_finished_deletes_the_experiment(ns, op, kube, kuberay, ray_api):
    status = start_running(op, kuberay, ttlSecondsAfterFinished=30)
    ray_api.set(status["jobId"], "SUCCEEDED")
    assert op.step()["phase"] == "Succeeded"
    op.clock.advance(29)
    op.step()
    assert not op.last_outcome.deleted
    op.clock.advance(2)
    op.step()
    assert op.last_outcome.deleted
    [experiment] = kube.client.list_namespaced_custom_object("rltrainer.io", "v1alpha1", ns, "rlexperiments")[
        "items"
    ]
    assert experiment["metadata"]["deletionTimestamp"]  # foreground: the garbage collector finishes it
    assert wait_for(
        "the experiment gone",
        lambda: (
            not kube.client.list_namespaced_custom_object("rltrainer.io", "v1alpha1", ns, "rlexperiments")[
                "items"
            ]
        ),
    )


def test_the_garbage_collector_deletes_what_the_experiment_owns(ns, op, kube, kuberay):
    """Without the operator (no finalizer), deleting the experiment still deletes its RayCluster:
    the real garbage collector follows the ownerReference the builder wrote."""
    apply(kube, experiment_manifest())
    op.step()
    assert kuberay.live(ns, CLUSTER)
    kube.client.delete_namespaced_custom_object("rltrainer.io", "v1alpha1", ns, "rlexperiments", NAME)
    assert kuberay.deleted(ns, CLUSTER, wait_s=30)


def test_finalize_stops_the_job_and_deletes_the_cluster(ns, op, kube, kuberay, ray_api):
    status = start_running(op, kuberay)
    op.reconciler.finalize(get_experiment(kube))
    assert ray_api.stopped == [status["jobId"]] and kuberay.deleted(ns, CLUSTER)


def test_stale_reads_create_nothing_twice(ns, op, kube, kuberay, ray_api):
    """An operator restarted between acting and writing status repeats the step harmlessly."""
    apply(kube, experiment_manifest())
    op.step(write_status=False)
    op.step(write_status=False)
    assert len(kuberay.list(ns)) == 1
    op.step()
    kuberay.ready(ns, CLUSTER)
    op.step(write_status=False)
    status = op.step()
    assert status["phase"] == "Running" and len(ray_api.submissions) == 1


def test_kueue_queue_label_reaches_the_raycluster(ns, op, kube, kuberay):
    manifest = experiment_manifest()
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue"}
    apply(kube, manifest)
    op.step()
    assert kuberay.get(ns, CLUSTER)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"


def test_every_generation_is_observed_even_without_a_transition(op, kube, kuberay, ray_api):
    status = start_running(op, kuberay)
    patch_spec(kube, {"config": {"train_batch_size": 512}})  # applies at the next restart
    status = op.step()
    assert status["phase"] == "Running" and status["observedGeneration"] == 2
    assert len(ray_api.submissions) == 1  # the running driver is left alone


def test_a_cluster_owned_by_another_is_not_adopted(ns, op, kube, kuberay):
    """A RayCluster of the experiment's name that another object owns (e.g. a deleted namesake's
    that the garbage collector has yet to remove) is never used."""
    apply(kube, experiment_manifest())
    op.step()
    # The real garbage collector removes a cluster whose owner is gone within moments, so the
    # stranger here is an owner that exists.
    stranger = kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "stranger"}})
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "stranger", "uid": stranger.metadata.uid}
    kube.client.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        ns,
        "rayclusters",
        CLUSTER,
        {"metadata": {"ownerReferences": [owner]}},
        _content_type=MERGE,
    )
    kuberay.ready(ns, CLUSTER)
    assert op.step()["phase"] == "Provisioning"  # waits instead of submitting to a stranger's cluster


# Pods whose status a test writes as the kubelet would. They name a scheduler that does not
# exist: where tests/node's kubelet runs on the same control plane (one xdist worker runs both),
# the real scheduler would otherwise place them there and their kubelet rewrite their status.
NOT_SCHEDULED = "rltrainer-tests-not-scheduled"


def kubelet_shaped_pod(kube, name: str, group: str, container: dict) -> None:
    """Create a Pod of the cluster's ``group`` that no scheduler or kubelet touches (409 is fine)."""
    core = kubernetes.client.CoreV1Api(kube.api_client)
    labels = {"ray.io/cluster": CLUSTER, "ray.io/group": group}
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"schedulerName": NOT_SCHEDULED, "containers": [container]},
    }
    try:
        core.create_namespaced_pod(kube.ns, body)
    except kubernetes.client.ApiException as err:
        assert err.status == 409


def crash_looping_pod(kube, restarts: int) -> None:
    """A rollout Pod of the cluster whose container keeps dying, as the kubelet reports it."""
    core = kubernetes.client.CoreV1Api(kube.api_client)
    name = f"{CLUSTER}-rollouts-worker-abcde"
    kubelet_shaped_pod(kube, name, "rollouts", {"name": "ray-worker", "image": "trainer:1"})
    last = {
        "terminated": {
            "reason": "Error",
            "exitCode": 1,
            "message": "ray start\nOSError: no GCS at 10.0.0.1\n",
        }
    }
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "ray-worker",
                "image": "trainer:1",
                "imageID": "",
                "ready": False,
                "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": last,
            }
        ],
    }
    core.patch_namespaced_pod_status(name, kube.ns, {"status": status})


@pytest.mark.usefixtures("ray_api")
def test_a_worker_pod_crash_looping_while_running_restarts_then_fails(op, kube, kuberay):
    """Said at once, with the container's last line; after ``crash_loop_restarts`` restarts the
    experiment restarts on a new cluster, and past its backoff limit it fails: never Running forever."""
    start_running(op, kuberay, faultTolerance={"backoffLimit": 0})
    crash_looping_pod(kube, restarts=1)
    status = op.step()
    assert status["phase"] == "Running" and condition(status, "Running")["reason"] == "CrashLoopBackOff"
    assert "group rollouts" in status["message"] and status["message"].endswith("OSError: no GCS at 10.0.0.1")
    crash_looping_pod(kube, restarts=3)
    status = op.step()
    assert status["phase"] == "Failed", status
    assert "restarted 3 times" in condition(status, "Failed")["message"]
    assert "OSError: no GCS at 10.0.0.1" in condition(status, "Failed")["message"]


def test_a_job_ray_failed_for_memory_restarts_naming_the_pods_group(op, kube, kuberay, ray_api):
    """The job's message keeps only the driver's last lines; Ray's words naming the node are in
    its logs: the restart's reason is OOMKilled, naming the learner pod's group and limit."""
    status = start_running(op, kuberay)
    core = kubernetes.client.CoreV1Api(kube.api_client)
    name = f"{CLUSTER}-learners-worker-xyz12"
    container = {"name": "ray-worker", "image": "trainer:1", "resources": {"limits": {"memory": "340Mi"}}}
    kubelet_shaped_pod(kube, name, "learners", container)
    core.patch_namespaced_pod_status(name, kube.ns, {"status": {"podIP": "10.244.0.64"}})
    logs = (
        "ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low on memory."
        " Memory on the node (IP: 10.244.0.64, ID: 70fa) was 0.32GB used / 0.33GB limit (0.959157)\n"
    )
    tail = "Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/"
    ray_api.set(status["jobId"], "FAILED", f"Job entrypoint command failed with exit code 1:\n{tail}", logs)
    status = op.step()
    restarting = condition(status, "Restarting")
    assert status["phase"] == "Restarting" and restarting["reason"] == "OOMKilled", status
    assert "group learners" in restarting["message"] and "340Mi" in restarting["message"]


# --- Kueue: queued, preempted; disruptions with a checkpoint on the signal ----------------------
# Kueue itself runs on the real node (tests/node/test_shared_cluster.py); here its two effects on
# a RayCluster are played: the suspend it sets (its webhook at creation, its preemption later).

QUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "team-gpus", "kueue.x-k8s.io/priority-class": "low"}


def kueue_suspends(kube, ns: str, suspend: bool = True) -> None:
    kube.client.patch_namespaced_custom_object(
        "ray.io", "v1", ns, "rayclusters", CLUSTER, {"spec": {"suspend": suspend}}, _content_type=MERGE
    )


def queued_manifest(**spec: Any) -> dict[str, Any]:
    manifest = experiment_manifest(**spec)
    manifest["metadata"]["labels"] = dict(QUEUE_LABELS)
    return manifest


def test_a_queued_experiment_waits_without_timing_out_then_runs(ns, op, kube, kuberay):
    apply(kube, queued_manifest(activeDeadlineSeconds=120))
    op.step()
    cluster = kuberay.get(ns, CLUSTER)
    assert {k: cluster["metadata"]["labels"][k] for k in QUEUE_LABELS} == QUEUE_LABELS
    kueue_suspends(kube, ns)
    status = op.step()
    assert status["phase"] == "Queued" and status.get("startTime") is None
    assert condition(status, "Queued")["status"] == "True"
    assert condition(status, "Provisioned")["status"] == "False"
    # Kueue's API is not served on this control plane: the message says what is awaited.
    assert "LocalQueue team-gpus" in status["message"], status
    op.clock.advance(3600)  # far past the provisioning timeout (60 s) and the deadline (120 s)
    status = op.step()
    assert status["phase"] == "Queued" and status["restarts"] == 0
    assert op.last_outcome.status is None  # nothing new: no event, no write

    kueue_suspends(kube, ns, suspend=False)  # admitted
    status = op.step()
    assert status["phase"] == "Provisioning" and condition(status, "Provisioned")["reason"] == "Admitted"
    assert status["startTime"] == "2026-01-01T01:00:00Z"  # the deadline counts from admission
    kuberay.ready(ns, CLUSTER)
    assert op.step()["phase"] == "Running"


def test_a_kueue_preemption_queues_the_experiment_and_resumes_from_the_signals_checkpoint(
    ns, op, kube, kuberay, ray_api
):
    apply(kube, queued_manifest())
    op.step()
    kuberay.ready(ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Running"
    signalled = "s3://checkpoints/rl/ml/cartpole/trial/checkpoint_000012"
    kueue_suspends(kube, ns)  # preempted: KubeRay deletes the pods, their hooks get the checkpoint
    op.progress[(ns, NAME)] = {"iteration": 12, "last_checkpoint": signalled}
    status = op.step()
    assert status["phase"] == "Queued" and status["disruptions"] == 1 and status["restarts"] == 0
    assert kuberay.get(ns, CLUSTER) is not None  # Kueue's to hold, not deleted

    kueue_suspends(kube, ns, suspend=False)
    kuberay.ready(ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Running"
    assert f"--resume-from {signalled}" in ray_api.submissions[-1]["entrypoint"]


def test_a_driver_preempted_by_a_pods_hook_resumes_at_once_not_counted_as_a_restart(ns, op, kuberay, ray_api):
    status = start_running(op, kuberay)
    signalled = "s3://checkpoints/rl/ml/cartpole/trial/checkpoint_000009"
    op.progress[(ns, NAME)] = {
        "iteration": 9,
        "last_checkpoint": signalled,
        "preempted": {"reason": "pod-terminating", "requested_at": 1.0e10, "seconds_to_checkpoint": 2.5},
    }
    last_line = f"preempted (pod-terminating): checkpoint {signalled} written after 9 iteration(s)"
    ray_api.set(status["jobId"], "FAILED", f"...\n{last_line}")
    status = op.step()
    assert status["phase"] == "Restarting" and condition(status, "Restarting")["reason"] == "Disrupted"
    assert status["restarts"] == 0 and status["disruptions"] == 1
    assert "2.5 s after the signal" in status["message"], status
    status = op.step()  # no backoff: at once, on the same (healthy) cluster
    assert status["phase"] == "Running"
    assert f"--resume-from {signalled}" in ray_api.submissions[-1]["entrypoint"]


def test_a_grace_period_shorter_than_an_iteration_and_a_checkpoint_is_warned_once(ns, op, kuberay):
    start_running(op, kuberay, preemption={"gracePeriodSeconds": 30})
    op.progress[(ns, NAME)] = {"iteration": 3, "seconds_per_iteration": 20.0, "seconds_per_checkpoint": 8.0}
    status = op.step()
    assert status["gracePeriodNeededSeconds"] == 33  # 20 + 8 + Ray's stop (5)
    warned = [message for reason, message in op.events if reason == "GracePeriodTooShort"]
    assert len(warned) == 1 and "at least 33" in warned[0], op.events
    op.step()
    assert len([r for r, _ in op.events if r == "GracePeriodTooShort"]) == 1


def test_a_grace_period_below_ten_seconds_is_refused_by_the_api_server(kube):
    with pytest.raises(kubernetes.client.ApiException) as refused:
        apply(kube, experiment_manifest(preemption={"gracePeriodSeconds": 5}))
    assert "gracePeriodSeconds" in refused.value.body and "10" in refused.value.body
