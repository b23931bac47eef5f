"""Env-runner fault tolerance through the operator: ``status.envRunnerRestarts`` counts over every
driver attempt (each driver counts from 0), and ``faultTolerance.envRunnerRestartDelaySeconds``
reaches the driver as rltrainer's ``delay_between_env_runner_restarts_s``."""

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


def driver_reports(op, restarts: int, iteration: int) -> dict:
    """The driver's progress.json with ``restarts`` env-runner restarts; one reconcile."""
    op.progress[(op.ns, NAME)] = {"iteration": iteration, "num_env_runner_restarts": restarts}
    return op.step()


def test_env_runner_restarts_count_on_across_experiment_restarts(op, kuberay, ray_api):
    status = start_running(op, kuberay)
    assert status.get("envRunnerRestarts") is None  # nothing reported yet
    assert driver_reports(op, 0, 1)["envRunnerRestarts"] == 0
    assert driver_reports(op, 2, 2)["envRunnerRestarts"] == 2
    status = driver_reports(op, 3, 3)
    assert (status["envRunnerRestarts"], status["driverEnvRunnerRestarts"]) == (3, 3)

    # The driver fails: the experiment restarts, and the new driver counts from 0 again.
    ray_api.set(status["jobId"], "FAILED", "boom")
    assert op.step()["phase"] == "Restarting"
    op.clock.advance(10)
    status = op.step()
    assert status["phase"] == "Running" and status["restarts"] == 1
    assert status["envRunnerRestarts"] == 3
    # progress.json is still the old driver's until the new one writes: nothing counted twice.
    assert driver_reports(op, 3, 3)["envRunnerRestarts"] == 3
    assert driver_reports(op, 0, 4)["envRunnerRestarts"] == 3
    status = driver_reports(op, 1, 5)
    assert (status["envRunnerRestarts"], status["driverEnvRunnerRestarts"]) == (4, 1)

    # A second restart: the total goes on from there.
    ray_api.set(status["jobId"], "FAILED", "boom")
    op.step()
    op.clock.advance(20)
    assert op.step()["phase"] == "Running"
    assert driver_reports(op, 0, 6)["envRunnerRestarts"] == 4
    assert driver_reports(op, 2, 7)["envRunnerRestarts"] == 6


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
