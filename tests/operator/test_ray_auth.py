"""Ray token authentication (``spec.rayAuth.mode``), on the real API server.

The operator derives each experiment's token from its own key and the experiment's uid, writes
it once into a Secret the experiment owns (it may create Secrets, never read them), points the
RayCluster's ``authOptions`` at it, and sends it on every job API call; the fake job API
answers 401/403 without the right token, as Ray does.
"""

from __future__ import annotations

import base64
import json
import logging

import pytest
from conftest import apply, experiment_manifest, get_experiment, patch_spec, wait_for
from test_reconciler import CLUSTER, NAME, Operator, condition, start_running

from rltrainer_operator.builders.naming import ray_token_secret_name
from rltrainer_operator.builders.ray_token import ray_token
from rltrainer_operator.ray_jobs import RayAuthError, RayJobClient, RayJobError
from rltrainer_operator.settings import Settings
from rltrainer_operator.validation import InvalidSpec, validate_experiment

KEY = "test-key"  # test_reconciler.Operator's key
SECRET = ray_token_secret_name(CLUSTER)


@pytest.fixture
def op(kube):
    operator = Operator(kube)
    yield operator
    operator.close()


def uid(kube) -> str:
    return get_experiment(kube)["metadata"]["uid"]


def secret_creates(kube) -> list[int]:
    """The HTTP codes of every create of a Secret in the test's namespace (the audit log)."""
    return [e["responseStatus"]["code"] for e in kube.requests(verb="create", resource="secrets")]


def test_the_token_secret_is_created_once_owned_by_the_experiment(kube, op, kuberay, ray_api):
    apply(kube, experiment_manifest())
    token = ray_token(KEY, uid(kube))
    ray_api.token = token  # the job API accepts this token only
    assert op.step()["phase"] == "Provisioning"

    secret = kube.core.read_namespaced_secret(SECRET, kube.ns)  # as admin: the operator cannot
    assert base64.b64decode(secret.data["auth_token"]).decode() == token
    assert secret.immutable is True and secret.metadata.labels["rltrainer.io/experiment"] == NAME
    [owner] = secret.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("RLExperiment", NAME, uid(kube))
    cluster = kuberay.get(kube.ns, CLUSTER)
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": SECRET}

    kuberay.ready(kube.ns, CLUSTER)
    status = op.step()
    assert status["phase"] == "Running"  # the fake accepted the submission
    assert ray_api.rejected == 0 and set(ray_api.authorizations) == {f"Bearer {token}"}

    # A lost head: a new cluster; its Secret is there already (409), so nothing is created twice.
    kuberay.lose_head(kube.ns, CLUSTER)
    assert op.step()["phase"] == "Restarting"
    assert kuberay.deleted(kube.ns, CLUSTER, wait_s=30)
    op.clock.advance(10)
    assert op.step()["phase"] == "Provisioning"
    kuberay.ready(kube.ns, CLUSTER)
    ray_api.forget_all()
    assert op.step()["phase"] == "Running"
    assert wait_for("two creates in the audit log", lambda: sorted(secret_creates(kube)) == [201, 409])
    assert ray_api.rejected == 0


def test_the_garbage_collector_deletes_the_token_secret_with_the_experiment(kube, op):
    apply(kube, experiment_manifest())
    op.step()
    kube.client.delete_namespaced_custom_object("rltrainer.io", "v1alpha1", kube.ns, "rlexperiments", NAME)
    wait_for("the Secret gone", lambda: SECRET not in {s.metadata.name for s in secrets(kube)}, 30)


def secrets(kube) -> list:
    return kube.core.list_namespaced_secret(kube.ns).items


def test_the_job_client_sends_the_token_and_the_fake_checks_it(ray_api):
    ray_api.token = "right"
    body = {"submission_id": "job-1", "entrypoint": "true"}
    with pytest.raises(RayAuthError, match="wants a token and the operator sent none .*HTTP 401"):
        RayJobClient(f"http://127.0.0.1:{ray_api.port}").submit(body)
    with pytest.raises(RayAuthError, match="rejected the operator's token .*: HTTP 403"):
        RayJobClient(f"http://127.0.0.1:{ray_api.port}", token="wrong").get("job-1")
    assert issubclass(RayAuthError, RayJobError)  # the reconciler's handling of job API errors
    client = RayJobClient(f"http://127.0.0.1:{ray_api.port}", token="right")
    assert client.submit(body).status == "PENDING" and client.get("job-1").status == "RUNNING"
    client.stop("job-1")
    assert ray_api.stopped == ["job-1"] and ray_api.authorizations[-1] == "Bearer right"
    assert "right" not in repr(client)


def test_a_wrong_key_is_rejected_by_the_cluster_and_said_so(kube, kuberay, ray_api):
    """An operator whose key changed derives another token: the job API's 403 is in the status."""
    op = Operator(kube, ray_token_key="another-key")
    try:
        apply(kube, experiment_manifest())
        ray_api.token = ray_token(KEY, uid(kube))  # what the cluster got from the first key
        op.step()
        kuberay.ready(kube.ns, CLUSTER)
        status = op.step()
        assert status["phase"] == "Provisioning" and ray_api.submissions == []
        assert condition(status, "Provisioned")["reason"] == "RayTokenRejected"
        assert "rejected the operator's token" in status["message"] and "HTTP 403" in status["message"]
        assert op.step()["phase"] == "Provisioning" and op.last_outcome.status is None  # said once
        assert [reason for reason, _ in op.events] == ["Provisioning", "RayTokenRejected"]
    finally:
        op.close()


def test_an_operator_without_a_key_fails_a_token_experiment_once(kube, kuberay):
    op = Operator(kube, ray_token_key="")
    try:
        apply(kube, experiment_manifest())
        status = op.step()
        assert status["phase"] == "Failed"
        failed = condition(status, "Failed")
        assert failed["reason"] == "RayTokenKeyMissing"
        assert "RLTRAINER_OPERATOR_RAY_TOKEN_KEY" in failed["message"]
        assert "Helm chart sets it" in failed["message"]
        assert kuberay.list(kube.ns) == [] and secret_creates(kube) == []
        op.clock.advance(3600)
        assert op.step()["phase"] == "Failed" and op.last_outcome.status is None  # no retry loop
        assert [reason for reason, _ in op.events] == ["RayTokenKeyMissing"]

        patch_spec(kube, {"rayAuth": {"mode": "disabled"}})  # a new generation starts it again
        assert op.step()["phase"] == "Provisioning"
    finally:
        op.close()


def test_disabled_mode_creates_no_secret_and_sends_no_token(kube, kuberay, ray_api):
    op = Operator(kube, ray_token_key="")  # no key needed
    try:
        start_running(op, kuberay, rayAuth={"mode": "disabled"})
        assert "authOptions" not in kuberay.get(kube.ns, CLUSTER)["spec"]
        assert secret_creates(kube) == [] and SECRET not in {s.metadata.name for s in secrets(kube)}
        assert ray_api.authorizations and set(ray_api.authorizations) == {None}
    finally:
        op.close()


def test_the_token_is_stable_per_uid_and_differs_across_uids_and_keys():
    uid_a, uid_b = "0b9d7f0e-6c1f-4c1e-9d55-1a2b3c4d5e6f", "5e6f0b9d-7f0e-6c1f-4c1e-9d551a2b3c4d"
    token = ray_token("key-1", uid_a)
    assert token == ray_token("key-1", uid_a) and len(token) == 64 and int(token, 16) >= 0
    assert token != ray_token("key-1", uid_b)
    assert token != ray_token("key-2", uid_a)


def test_the_key_never_shows(kube, kuberay, ray_api, caplog):
    key = "do-not-show-this-key-0123456789"
    assert key not in repr(Settings(ray_token_key=key))
    assert key not in repr(Settings.from_env({"RLTRAINER_OPERATOR_RAY_TOKEN_KEY": key}))
    assert Settings.from_env({"RLTRAINER_OPERATOR_RAY_TOKEN_KEY": key}).ray_token_key == key
    caplog.set_level(logging.DEBUG)
    op = Operator(kube, ray_token_key=key)
    try:
        status = start_running(op, kuberay)
        ray_api.set(status["jobId"], "FAILED", "boom")
        status = op.step()
        assert status["phase"] == "Restarting"
    finally:
        op.close()
    assert key not in json.dumps(get_experiment(kube))
    assert key not in json.dumps(kube.events()) and key not in json.dumps(op.events)
    assert key not in caplog.text
    secret = kube.core.read_namespaced_secret(SECRET, kube.ns)
    assert key not in base64.b64decode(secret.data["auth_token"]).decode()


@pytest.mark.parametrize(
    ("ray_version", "mode", "ok"),
    [
        ("2.51.0", "token", False),
        ("2.52.0", "disabled", False),
        ("2.53.0", "token", True),
        ("2.53.0", "disabled", True),
    ],
)
def test_ray_below_2_53_is_refused_whatever_the_auth_mode(ray_version, mode, ok):
    """KubeRay probes Ray below 2.53 with wget (the image has none): refused, saying so; token
    mode's own floor (2.52) lies below it."""
    body = experiment_manifest(rayVersion=ray_version, rayAuth={"mode": mode})
    if ok:
        assert validate_experiment(body).spec.rayAuth.mode == mode
        return
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(body)
    assert raised.value.field == "spec.rayVersion"
    assert "2.53.0" in raised.value.message and "wget" in raised.value.message


def test_token_mode_is_the_default():
    assert validate_experiment(experiment_manifest()).spec.rayAuth.mode == "token"
