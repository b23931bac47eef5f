"""The real kopf runtime with our handlers, against the API stand-in (kmock + testing/kapi.py).

What the reconciler tests cannot show: that kopf calls the handlers on create, spec updates,
timers and deletion; that status, finalizers and events reach the API; that a restarted
operator picks up where the last one stopped without creating anything twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import apply, experiment_manifest, get_experiment, patch_spec

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.handlers import FINALIZER
from rltrainer_operator.testing.runner import OperatorRunner

NS, NAME = "ml", "cartpole"
CLUSTER = raycluster_name(NAME)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def phase(kube: Any, name: str = NAME) -> str | None:
    try:
        return (get_experiment(kube, name).get("status") or {}).get("phase")
    except Exception:  # noqa: BLE001 - gone
        return None


def wait_phase(kube: Any, wanted: str, name: str = NAME, timeout_s: float = 60) -> dict[str, Any]:
    wait_for(f"phase {wanted} (now {phase(kube, name)})", lambda: phase(kube, name) == wanted, timeout_s)
    return get_experiment(kube, name)


def start(kube: Any, **kwargs: Any) -> OperatorRunner:
    runner = OperatorRunner(kube.url, **kwargs).start()
    runner.memo.reconciler.read_progress = lambda _spec, _ns, _name: runner.memo.get("progress")
    return runner


def events(kube: Any) -> list[tuple[str, str]]:
    items = kube.call(
        lambda: [
            obj.raw for key, obj in kube.api.objects.items() if key[0] == "v1/events" and not obj.deleted
        ]
    )
    return [(item.get("reason"), item.get("message")) for item in items]


def requests_to(kube: Any, method: str, resource: str) -> int:
    return sum(
        1
        for request in kube.api.requests
        if request.method == method and request.resource is not None and request.resource.plural == resource
    )


@pytest.fixture
def operator(kube):
    runner = start(kube, namespaces=[NS])
    yield runner
    runner.stop()


def test_lifecycle_through_kopf(kube, kuberay, ray_api, operator):
    apply(kube, experiment_manifest())
    body = wait_phase(kube, "Provisioning")
    assert FINALIZER in body["metadata"]["finalizers"]
    wait_for("the RayCluster", lambda: kuberay.get(NS, CLUSTER))
    kuberay.ready(NS, CLUSTER)
    body = wait_phase(kube, "Running")
    operator.memo.progress = {"iteration": 2, "timesteps": 800, "episode_return_mean": 21.5}
    wait_for("progress in status", lambda: get_experiment(kube)["status"].get("iteration") == 2)
    ray_api.set(body["status"]["jobId"], "SUCCEEDED")
    body = wait_phase(kube, "Succeeded")
    assert body["status"]["episodeReturnMean"] == 21.5
    assert kuberay.deleted(NS, CLUSTER)
    reasons = [reason for reason, _ in wait_for("3 events", lambda: len(events(kube)) >= 3 and events(kube))]
    assert reasons[:3] == ["Provisioning", "JobSubmitted", "JobSucceeded"]
    metrics = operator.memo.metrics
    assert metrics.experiments.labels("Succeeded")._value.get() == 1
    assert metrics.experiments.labels("Running")._value.get() == 0
    assert metrics.reconcile_errors._value.get() == 0


@pytest.mark.usefixtures("operator")
def test_delete_runs_the_finalizer(kube, kuberay, ray_api):
    apply(kube, experiment_manifest())
    wait_for("the RayCluster", lambda: kuberay.get(NS, CLUSTER))
    kuberay.ready(NS, CLUSTER)
    job = wait_phase(kube, "Running")["status"]["jobId"]
    kube.client.delete_namespaced_custom_object("rltrainer.io", "v1alpha1", NS, "rlexperiments", NAME)
    wait_for("the experiment to be gone", lambda: phase(kube) is None)
    assert kuberay.deleted(NS, CLUSTER)
    assert ray_api.stopped == [job]


@pytest.mark.usefixtures("operator")
def test_invalid_spec_fails_without_a_retry_loop(kube, kuberay):
    apply(kube, experiment_manifest(config={"num_env_runners": 4}))
    body = wait_phase(kube, "Failed")
    failed = next(c for c in body["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert (
        "spec.config.num_env_runners" in failed["message"] and "spec.rollouts.replicas" in failed["message"]
    )
    time.sleep(2.5)  # a few timer ticks
    assert [reason for reason, _ in events(kube)] == ["InvalidSpec"]
    assert kuberay.list(NS) == []


@pytest.mark.usefixtures("operator")
def test_spec_update_suspends_and_resumes(kube, kuberay, ray_api):
    apply(kube, experiment_manifest())
    wait_for("the RayCluster", lambda: kuberay.get(NS, CLUSTER))
    kuberay.ready(NS, CLUSTER)
    wait_phase(kube, "Running")
    patch_spec(kube, {"suspend": True})
    wait_phase(kube, "Suspended")
    assert kuberay.deleted(NS, CLUSTER) and len(ray_api.stopped) == 1
    patch_spec(kube, {"suspend": False})
    wait_for("a new RayCluster", lambda: kuberay.get(NS, CLUSTER))
    kuberay.ready(NS, CLUSTER)
    assert wait_phase(kube, "Running")["status"]["restarts"] == 0


@pytest.mark.parametrize("stop_in", ["Provisioning", "Running", "Restarting"])
def test_operator_restart_creates_nothing_twice(kube, kuberay, ray_api, stop_in):
    runner = start(kube, namespaces=[NS])
    try:
        apply(kube, experiment_manifest(faultTolerance={"backoffLimit": 2}))
        wait_phase(kube, "Provisioning")
        if stop_in != "Provisioning":
            kuberay.ready(NS, CLUSTER)
            job = wait_phase(kube, "Running")["status"]["jobId"]
        if stop_in == "Restarting":
            ray_api.set(job, "FAILED", "boom")
            wait_phase(kube, "Restarting")
    finally:
        runner.stop()
    creates, submissions = requests_to(kube, "POST", "rayclusters"), len(ray_api.submissions)
    runner = start(kube, namespaces=[NS])  # a new operator process: no memory of the old one
    try:
        if stop_in == "Provisioning":
            kuberay.ready(NS, CLUSTER)
        body = wait_phase(kube, "Running")
        time.sleep(2)  # a few more ticks
        assert requests_to(kube, "POST", "rayclusters") == creates == 1
        expected = submissions + (1 if stop_in != "Running" else 0)
        assert len(ray_api.submissions) == expected
        assert body["status"]["restarts"] == (1 if stop_in == "Restarting" else 0)
    finally:
        runner.stop()


def test_cluster_wide_operator_reconciles_every_namespace(kube, kuberay):
    runner = start(kube, namespaces=None)
    try:
        apply(kube, experiment_manifest(namespace="team-a"))
        apply(kube, experiment_manifest(namespace="team-b"))
        wait_for("two RayClusters", lambda: kuberay.get("team-a", CLUSTER) and kuberay.get("team-b", CLUSTER))
    finally:
        runner.stop()
