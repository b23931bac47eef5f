"""Env-runner and learner fault tolerance through the operator: ``status.envRunnerRestarts`` and
``status.learnerRestarts`` count over every driver attempt (each driver counts from 0), and the
``faultTolerance`` settings reach the driver as rltrainer's config keys."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import MERGE, experiment_manifest
from test_reconciler import NAME, Operator, start_running

from rltrainer_operator.builders import job
from rltrainer_operator.settings import Settings
from rltrainer_operator.validation import InvalidSpec, validate_experiment


@pytest.fixture
def op(kube):
    operator = Operator(kube)
    yield operator
    operator.close()


#: (the driver's progress.json key, the status's total, the status's per-driver count)
KINDS = {
    "env runners": ("num_env_runner_restarts", "envRunnerRestarts", "driverEnvRunnerRestarts"),
    "learners": ("num_learner_restarts", "learnerRestarts", "driverLearnerRestarts"),
}


def driver_reports(op, restarts: int, iteration: int, key: str = "num_env_runner_restarts") -> dict:
    """The driver's progress.json with ``restarts`` restarts under ``key``; one reconcile."""
    op.progress[(op.ns, NAME)] = {"iteration": iteration, key: restarts}
    return op.step()


@pytest.mark.parametrize("kind", KINDS)
def test_restarts_count_on_across_experiment_restarts(op, kuberay, ray_api, kind):
    key, total, own = KINDS[kind]

    def reports(restarts: int, iteration: int) -> dict:
        return driver_reports(op, restarts, iteration, key)

    status = start_running(op, kuberay)
    assert status.get(total) is None  # nothing reported yet
    assert reports(0, 1)[total] == 0
    assert reports(2, 2)[total] == 2
    status = reports(3, 3)
    assert (status[total], status[own]) == (3, 3)

    # The driver fails: the experiment restarts, and the new driver counts from 0 again.
    ray_api.set(status["jobId"], "FAILED", "boom")
    assert op.step()["phase"] == "Restarting"
    op.clock.advance(10)
    status = op.step()
    assert status["phase"] == "Running" and status["restarts"] == 1
    assert status[total] == 3
    # progress.json is still the old driver's until the new one writes: nothing counted twice.
    assert reports(3, 3)[total] == 3
    assert reports(0, 4)[total] == 3
    status = reports(1, 5)
    assert (status[total], status[own]) == (4, 1)

    # A second restart: the total goes on from there.
    ray_api.set(status["jobId"], "FAILED", "boom")
    op.step()
    op.clock.advance(20)
    assert op.step()["phase"] == "Running"
    assert reports(0, 6)[total] == 4
    assert reports(2, 7)[total] == 6


def test_a_status_from_before_the_total_is_carried_on(op, kube, kuberay):
    """A status written when envRunnerRestarts was the current driver's own count."""
    start_running(op, kuberay)
    kube.client.patch_namespaced_custom_object_status(
        "rltrainer.io",
        "v1alpha1",
        op.ns,
        "rlexperiments",
        NAME,
        {"status": {"envRunnerRestarts": 2}},
        _content_type=MERGE,
    )
    assert driver_reports(op, 2, 3)["envRunnerRestarts"] == 2
    assert driver_reports(op, 3, 4)["envRunnerRestarts"] == 3


def driver_config(**fault_tolerance) -> dict:
    spec = validate_experiment(experiment_manifest(faultTolerance=fault_tolerance)).spec
    command = shlex.split(job.entrypoint(spec, "ml", NAME, Settings()))
    return json.loads(command[command.index("--config") + 1])


def test_the_restart_delay_reaches_the_driver():
    assert driver_config()["delay_between_env_runner_restarts_s"] == 60  # rltrainer's and RLlib's default
    assert driver_config(envRunnerRestartDelaySeconds=0)["delay_between_env_runner_restarts_s"] == 0
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(experiment_manifest(faultTolerance={"envRunnerRestartDelaySeconds": -1}))
    assert raised.value.field == "spec.faultTolerance.envRunnerRestartDelaySeconds"


def test_the_restart_delay_is_not_a_config_key():
    body = experiment_manifest(config={"delay_between_env_runner_restarts_s": 5})
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(body)
    assert raised.value.field == "spec.config.delay_between_env_runner_restarts_s"
    assert "spec.faultTolerance.envRunnerRestartDelaySeconds" in raised.value.message


def test_learner_fault_tolerance_reaches_the_driver():
    defaults = driver_config()
    assert (
        defaults["restart_failed_learners"],
        defaults["max_num_learner_restarts"],
        defaults["learner_restart_timeout_s"],
    ) == (True, 1000, 600)
    chosen = driver_config(restartFailedLearners=False, maxLearnerRestarts=2, learnerRestartTimeoutSeconds=30)
    assert (
        chosen["restart_failed_learners"],
        chosen["max_num_learner_restarts"],
        chosen["learner_restart_timeout_s"],
    ) == (False, 2, 30)
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(experiment_manifest(faultTolerance={"learnerRestartTimeoutSeconds": 0}))
    assert raised.value.field == "spec.faultTolerance.learnerRestartTimeoutSeconds"
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(experiment_manifest(config={"max_num_learner_restarts": 5}))
    assert "spec.faultTolerance.maxLearnerRestarts" in raised.value.message
