"""The real kopf runtime with our handlers, against the real API server (``testing/envtest.py``).

What the reconciler tests cannot show: that kopf calls the handlers on create, spec updates,
timers and deletion; that status, finalizers and events reach the API; that a restarted
operator picks up where the last one stopped without creating anything twice.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import apply, experiment_manifest, get_experiment, patch_spec, wait_for
from kubernetes.client.rest import ApiException

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.handlers import FINALIZER
from rltrainer_operator.testing.runner import OperatorRunner

NAME = "cartpole"
CLUSTER = raycluster_name(NAME)


def phase(kube: Any, name: str = NAME, namespace: str | None = None) -> str | None:
    try:
        return (get_experiment(kube, name, namespace).get("status") or {}).get("phase")
    except Exception:  # noqa: BLE001 - gone
        return None


def wait_phase(
    kube: Any, wanted: str, name: str = NAME, timeout_s: float = 60, namespace: str | None = None
) -> dict[str, Any]:
    wait_for(
        f"phase {wanted} (now {phase(kube, name, namespace)})",
        lambda: phase(kube, name, namespace) == wanted,
        timeout_s,
    )
    return get_experiment(kube, name, namespace)


def start(kube: Any, kubeconfig: str | None = None, **kwargs: Any) -> OperatorRunner:
    kwargs.setdefault("namespaces", [kube.ns])
    runner = OperatorRunner(kubeconfig=kubeconfig or kube.kubeconfig, **kwargs).start()
    runner.memo.reconciler.read_progress = lambda _spec, _ns, _name: runner.memo.get("progress")
    return runner


def events(kube: Any) -> list[tuple[str, str]]:
    return kube.events()


def creates(kube: Any, resource: str) -> int:
    """Successful creates of ``resource`` in the test's namespace (the API server's audit log)."""
    return sum(
        1 for e in kube.requests(verb="create", resource=resource) if e["responseStatus"]["code"] == 201
    )


@pytest.fixture
def operator(kube):
    runner = start(kube)
    yield runner
    runner.stop()


def test_lifecycle_through_kopf(kube, kuberay, ray_api, operator):
    apply(kube, experiment_manifest())
    body = wait_phase(kube, "Provisioning")
    assert FINALIZER in body["metadata"]["finalizers"]
    wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
    kuberay.ready(kube.ns, CLUSTER)
    body = wait_phase(kube, "Running")
    operator.memo.progress = {"iteration": 2, "timesteps": 800, "episode_return_mean": 21.5}
    wait_for("progress in status", lambda: get_experiment(kube)["status"].get("iteration") == 2)
    ray_api.set(body["status"]["jobId"], "SUCCEEDED")
    body = wait_phase(kube, "Succeeded")
    assert body["status"]["episodeReturnMean"] == 21.5
    assert kuberay.deleted(kube.ns, CLUSTER)
    reasons = [reason for reason, _ in wait_for("3 events", lambda: len(events(kube)) >= 3 and events(kube))]
    assert reasons[:3] == ["Provisioning", "JobSubmitted", "JobSucceeded"]
    metrics = operator.memo.metrics
    assert metrics.experiments.labels("Succeeded")._value.get() == 1
    assert metrics.experiments.labels("Running")._value.get() == 0
    assert metrics.reconcile_errors._value.get() == 0


@pytest.mark.usefixtures("operator")
def test_delete_runs_the_finalizer(kube, kuberay, ray_api):
    apply(kube, experiment_manifest())
    wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
    kuberay.ready(kube.ns, CLUSTER)
    job = wait_phase(kube, "Running")["status"]["jobId"]
    kube.client.delete_namespaced_custom_object("rltrainer.io", "v1alpha1", kube.ns, "rlexperiments", NAME)
    wait_for("the experiment to be gone", lambda: phase(kube) is None)
    assert kuberay.deleted(kube.ns, CLUSTER)
    assert ray_api.stopped == [job]


@pytest.mark.usefixtures("ray_api")
def test_a_late_kopf_patch_never_undoes_a_newer_status(kube, kuberay, monkeypatch):
    # kopf applies a handler's patch after the handler returns, outside the experiment's lock;
    # meanwhile a RayCluster event can reconcile the same experiment and write a newer status.
    # On a busy machine kopf's patch came second and put back the old status (Provisioning, no
    # job id): a deletion then had no job to stop. Here kopf's patches are held back a second.
    import asyncio

    from kopf._cogs.clients import patching

    patch_obj = patching.patch_obj

    async def late_patch_obj(**kwargs: Any) -> Any:
        await asyncio.sleep(1.0)
        return await patch_obj(**kwargs)

    monkeypatch.setattr(patching, "patch_obj", late_patch_obj)
    runner = start(kube)
    try:
        apply(kube, experiment_manifest())
        wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
        kuberay.ready(kube.ns, CLUSTER)
        job = wait_phase(kube, "Running")["status"]["jobId"]
        seen = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            status = get_experiment(kube).get("status") or {}
            seen.add((status.get("phase"), status.get("jobId")))
            time.sleep(0.05)
        assert seen == {("Running", job)}, seen
    finally:
        runner.stop()


def test_the_finalizer_stops_the_job_the_operator_last_wrote():
    # kopf can hand the deletion a body from before the status patch that recorded the job (a
    # reconcile submitted it just before the delete): the finalizer stops the job it knows of.
    import threading
    from collections import defaultdict
    from types import SimpleNamespace

    from rltrainer_operator.handlers import finalize
    from rltrainer_operator.metrics import Metrics

    seen: list[dict[str, Any]] = []
    memo = SimpleNamespace(
        reconciler=SimpleNamespace(finalize=seen.append),
        metrics=Metrics(),
        locks=defaultdict(threading.Lock),
        written={"u1": {"phase": "Running", "jobId": "rlx-job-2", "rayClusterName": "rlx-c"}},
    )
    stale = {
        "metadata": {"name": NAME, "namespace": "ns", "uid": "u1"},
        "status": {"phase": "Provisioning", "observedGeneration": 1},
    }
    finalize(body=stale, memo=memo)
    assert seen[0]["status"]["jobId"] == "rlx-job-2" and seen[0]["status"]["rayClusterName"] == "rlx-c"
    assert not memo.written and not memo.locks


def experiment_gone(kube: Any, namespace: str) -> bool:
    try:
        get_experiment(kube, NAME, namespace)
    except ApiException as err:
        return err.status == 404
    return False


def namespace_gone(kube: Any, namespace: str) -> bool:
    return namespace not in {n.metadata.name for n in kube.core.list_namespace().items}


def test_deleting_the_namespace_completes(kube, kuberay, ray_api):
    """The namespace controller deletes the experiment and its RayCluster (in no set order); our
    finalizer lets go, so the namespace goes."""
    team = f"{kube.ns}-gone"
    kube.core.create_namespace({"metadata": {"name": team}})
    runner = start(kube, namespaces=[team])
    try:
        apply(kube, experiment_manifest(namespace=team))
        wait_for("the RayCluster", lambda: kuberay.get(team, CLUSTER))
        kuberay.ready(team, CLUSTER)
        job = wait_phase(kube, "Running", namespace=team)["status"]["jobId"]
        kube.core.delete_namespace(team)
        wait_for("the experiment gone: the finalizer let go", lambda: experiment_gone(kube, team))
        # The rest is the namespace controller's: it checks again for content left with a
        # backoff that grows on a loaded machine (a CI run took over 60 s here).
        try:
            wait_for("the namespace gone", lambda: namespace_gone(kube, team), 180)
        except AssertionError:
            conditions = kube.core.read_namespace(team).status.conditions or []
            raise AssertionError(
                f"namespace {team} still there: {[(c.type, c.message) for c in conditions]}"
            ) from None
        # The job is stopped when the finalizer finds the cluster still there; either way the
        # cluster's pods go with the namespace.
        assert ray_api.stopped in ([], [job])
    finally:
        runner.stop()


@pytest.mark.usefixtures("operator")
def test_invalid_spec_fails_without_a_retry_loop(kube, kuberay, caplog):
    apply(kube, experiment_manifest(config={"num_env_runners": 4}))
    body = wait_phase(kube, "Failed")
    failed = next(c for c in body["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert (
        "spec.config.num_env_runners" in failed["message"] and "spec.rollouts.replicas" in failed["message"]
    )
    time.sleep(2.5)  # a few timer ticks
    assert [reason for reason, _ in events(kube)] == ["InvalidSpec"]
    assert kuberay.list(kube.ns) == []
    assert not [r for r in caplog.records if r.exc_info], "a traceback in the operator's log"


@pytest.mark.usefixtures("operator")
def test_deadline_fails_and_every_generation_is_observed(kube, kuberay, ray_api):
    apply(kube, experiment_manifest(activeDeadlineSeconds=3))
    wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
    kuberay.ready(kube.ns, CLUSTER)
    running = wait_phase(kube, "Running")
    assert running["status"]["observedGeneration"] == 1
    patch_spec(kube, {"config": {"train_batch_size": 512}})  # a new generation, no transition
    wait_for("generation 2 observed", lambda: get_experiment(kube)["status"]["observedGeneration"] == 2)
    failed = wait_phase(kube, "Failed", timeout_s=30)
    condition = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "True",
        "DeadlineExceeded",
        2,
    )
    assert ray_api.stopped == [running["status"]["jobId"]] and kuberay.deleted(kube.ns, CLUSTER)


@pytest.mark.usefixtures("operator")
def test_spec_update_suspends_and_resumes(kube, kuberay, ray_api):
    apply(kube, experiment_manifest())
    wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))
    kuberay.ready(kube.ns, CLUSTER)
    wait_phase(kube, "Running")
    patch_spec(kube, {"suspend": True})
    wait_phase(kube, "Suspended")
    assert kuberay.deleted(kube.ns, CLUSTER) and len(ray_api.stopped) == 1
    patch_spec(kube, {"suspend": False})
    wait_for("a new RayCluster", lambda: kuberay.live(kube.ns, CLUSTER))
    kuberay.ready(kube.ns, CLUSTER)
    assert wait_phase(kube, "Running")["status"]["restarts"] == 0


@pytest.mark.parametrize("stop_in", ["Provisioning", "Running", "Restarting"])
def test_operator_restart_creates_nothing_twice(kube, kuberay, ray_api, stop_in):
    runner = start(kube)
    try:
        apply(kube, experiment_manifest(faultTolerance={"backoffLimit": 2}))
        wait_phase(kube, "Provisioning")
        if stop_in != "Provisioning":
            kuberay.ready(kube.ns, CLUSTER)
            job = wait_phase(kube, "Running")["status"]["jobId"]
        if stop_in == "Restarting":
            ray_api.set(job, "FAILED", "boom")
            wait_phase(kube, "Restarting")
    finally:
        runner.stop()
    created, submissions = creates(kube, "rayclusters"), len(ray_api.submissions)
    runner = start(kube)  # a new operator process: no memory of the old one
    try:
        if stop_in == "Provisioning":
            kuberay.ready(kube.ns, CLUSTER)
        body = wait_phase(kube, "Running")
        time.sleep(2)  # a few more ticks
        assert creates(kube, "rayclusters") == created == 1
        expected = submissions + (1 if stop_in != "Running" else 0)
        assert len(ray_api.submissions) == expected
        assert body["status"]["restarts"] == (1 if stop_in == "Restarting" else 0)
    finally:
        runner.stop()


def test_cluster_wide_operator_reconciles_every_namespace(kube, kuberay):
    teams = [f"{kube.ns}-a", f"{kube.ns}-b"]
    for team in teams:
        kube.core.create_namespace({"metadata": {"name": team}})
    runner = start(kube, namespaces=None)
    try:
        for team in teams:
            apply(kube, experiment_manifest(namespace=team))
        wait_for("two RayClusters", lambda: all(kuberay.get(team, CLUSTER) for team in teams))
    finally:
        runner.stop()
        for team in teams:
            kube.client.delete_namespaced_custom_object(
                "rltrainer.io", "v1alpha1", team, "rlexperiments", NAME
            )
            kube.core.delete_namespace(team)
