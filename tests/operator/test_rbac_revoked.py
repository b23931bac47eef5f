"""The operator's rights taken away while it runs, on the real API server with the chart's
ServiceAccount and RBAC (``test_rbac.install_rbac``) and the real kopf runtime.

- A rule removed from its ClusterRole (403): the experiment's Ready condition is False with
  reason ``PermissionDenied`` and a message naming the verb, the resource, the namespace, the
  identity and the ``kubectl auth can-i`` check, said by a Warning event too; kopf retries with
  backoff, not in a loop; with the rule back, the experiment carries on and Ready is the phase's.
- The status write itself refused: the Warning event (events allowed) or kopf's log line (events
  refused too) says so, on every try.
- Its ServiceAccount deleted (its token refused, 401): one log line says so, the operator stays up
  and waits with backoff instead of stopping on kopf's ``LoginError``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import pytest
from conftest import apply, experiment_manifest, get_experiment, wait_for
from kubernetes.client.exceptions import ApiException
from test_handlers import CLUSTER, NAME, start, wait_phase
from test_rbac import install_rbac
from test_reconciler import Operator, condition, start_running

import rltrainer_operator.kube as kube_module
from rltrainer_operator.kube import CredentialsRefused, PermissionDenied, refused, refused_delay


# --- without an API server: the messages and the backoff ---------------------------------------
def api_error(status: int, message: str) -> ApiException:
    err = ApiException(status=status, reason="Forbidden" if status == 403 else "Unauthorized")
    err.body = json.dumps({"kind": "Status", "code": status, "message": message})
    return err


def test_a_403_names_whose_call_what_where_and_the_check():
    user = "system:serviceaccount:ops:rlx"
    err = refused(
        "patch RLExperiment ml/cartpole status",
        api_error(
            403,
            f'rlexperiments.rltrainer.io "cartpole" is forbidden: User "{user}" cannot patch resource '
            f'"rlexperiments/status" in API group "rltrainer.io" in the namespace "ml"',
        ),
    )
    assert isinstance(err, PermissionDenied) and err.reason == "PermissionDenied"
    assert str(err).startswith(
        f"patch RLExperiment ml/cartpole status refused (HTTP 403 Forbidden): {user} may not patch "
        "rlexperiments.rltrainer.io/status in namespace ml;"
    )
    assert str(err).endswith(
        f"kubectl auth can-i patch rlexperiments.rltrainer.io --subresource=status -n ml --as={user}"
    )
    forbidden = f'secrets is forbidden: User "{user}" cannot create resource "secrets" in API group ""'
    core = refused("create Secret ml/t", api_error(403, forbidden))
    assert f"{user} may not create secrets cluster-wide" in str(core)
    assert str(core).endswith(f"kubectl auth can-i create secrets --as={user}")
    other = refused("get RayCluster ml/c", api_error(403, "denied by the admission policy"))
    assert "(HTTP 403 Forbidden: denied by the admission policy)" in str(other)


def test_a_401_says_the_credentials_are_refused():
    err = refused("get RayCluster ml/c", api_error(401, "Unauthorized"), "system:serviceaccount:ops:rlx")
    assert isinstance(err, CredentialsRefused)
    assert "(system:serviceaccount:ops:rlx) (HTTP 401 Unauthorized: Unauthorized)" in str(err)


def test_refused_calls_back_off():
    assert [refused_delay(retry) for retry in range(6)] == [10, 20, 40, 80, 120, 120]


def test_ready_says_a_refusal_until_a_reconcile_goes_through(kube, kuberay, monkeypatch):
    """A running experiment (the reconciler driven step by step, as admin): a refused call turns
    Ready False with the refusal, the phase stays; the next reconcile that goes through gives
    Ready, and the message, back to the phase."""
    op = Operator(kube)
    try:
        running = start_running(op, kuberay)
        forbidden = (
            f'User "u" cannot get resource "rayclusters" in API group "ray.io" in the namespace "{kube.ns}"'
        )
        denied = refused(f"get RayCluster {kube.ns}/{CLUSTER}", api_error(403, forbidden))

        def get_raycluster(*_: Any) -> None:
            raise denied

        with monkeypatch.context() as patched:
            patched.setattr(op.reconciler.kube, "get_raycluster", get_raycluster)
            status = op.step()
            assert op.last_outcome.refused is denied and status["phase"] == "Running"
            ready = condition(status, "Ready")
            assert (ready["status"], ready["reason"], ready["message"]) == (
                "False",
                "PermissionDenied",
                str(denied),
            )
            assert status["message"] == str(denied)
            assert condition(status, "Running") == condition(running, "Running")
            op.step()  # refused again: said once
        status = op.step()
        assert op.last_outcome.refused is None and status["phase"] == "Running"
        assert condition(status, "Ready") == {**condition(running, "Ready"), "lastTransitionTime": ANY}
        assert status["message"] == running["message"]
        assert [reason for reason, _ in op.events] == [
            "Provisioning",
            "JobSubmitted",
            "PermissionDenied",
            "Permitted",
        ]
    finally:
        op.close()


# --- on the real API server -----------------------------------------------------------------------
def cluster_role(kube: Any, operator_ns: str, account: str) -> str:
    """The ClusterRole bound to the operator's ServiceAccount."""
    for binding in kube.plane.kubectl_json("get", "clusterrolebindings", "-o", "json")["items"]:
        for subject in binding.get("subjects") or []:
            if (subject.get("namespace"), subject.get("name")) == (operator_ns, account):
                return binding["roleRef"]["name"]
    raise AssertionError(f"no ClusterRoleBinding for {operator_ns}/{account}")


@contextlib.contextmanager
def revoked(kube: Any, role: str, *calls: tuple[str, str, str]) -> Iterator[None]:
    """The ClusterRole without the ``(group, resource, verb)`` calls for the block; put back after."""
    original = kube.plane.kubectl_json("get", "clusterrole", role, "-o", "json")
    rules = []
    for rule in original["rules"]:
        verbs = [
            verb
            for verb in rule["verbs"]
            if not any(
                (group, resource, verb) == call
                for group in rule.get("apiGroups", [])
                for resource in rule.get("resources", [])
                for call in calls
            )
        ]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    kube.plane.kubectl_run("replace", "-f", "-", stdin=json.dumps({**original, "rules": rules}))
    try:
        yield
    finally:
        restored = kube.plane.kubectl_json("get", "clusterrole", role, "-o", "json")
        restored["rules"] = original["rules"]
        kube.plane.kubectl_run("replace", "-f", "-", stdin=json.dumps(restored))


@pytest.fixture
def operator_account(kube):
    """The chart's ServiceAccount and cluster-wide RBAC: (its namespace, name, user, ClusterRole)."""
    operator_ns, account = install_rbac(kube, {})
    user = f"system:serviceaccount:{operator_ns}:{account}"
    return operator_ns, account, user, cluster_role(kube, operator_ns, account)


def ready(kube: Any) -> dict[str, Any]:
    status = get_experiment(kube).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


def reasons(kube: Any) -> list[str]:
    """The operator's own events' reasons (kopf also posts its error log lines, as "Logging")."""
    return [reason for reason, _ in kube.events() if reason != "Logging"]


def refused_requests(kube: Any, user: str, since: float, **match: str) -> list[dict[str, Any]]:
    return [e for e in kube.requests(since, user=user, **match) if e["responseStatus"].get("code") == 403]


def test_a_missing_rule_is_a_condition_and_an_event_until_it_is_back(
    kube, kuberay, operator_account, monkeypatch
):
    operator_ns, account, user, role = operator_account
    monkeypatch.setattr(kube_module, "RETRY_DELAY_S", 1)  # backoff 1, 2, 4, ... s
    kubeconfig = str(kube.plane.service_account_kubeconfig(operator_ns, account))
    runner = start(kube, kubeconfig=kubeconfig)
    try:
        with revoked(kube, role, ("ray.io", "rayclusters", "create")):
            started = time.time()
            apply(kube, experiment_manifest())
            wait_for("Ready: PermissionDenied", lambda: ready(kube).get("reason") == "PermissionDenied")
            message = ready(kube)["message"]
            assert message.startswith(
                f"create RayCluster {kube.ns}/{CLUSTER} refused (HTTP 403 Forbidden): {user} may not "
                f"create rayclusters.ray.io in namespace {kube.ns};"
            ), message
            assert f"kubectl auth can-i create rayclusters.ray.io -n {kube.ns} --as={user}" in message
            assert ready(kube)["status"] == "False"
            assert get_experiment(kube)["status"]["message"] == message
            wait_for("the Warning event", lambda: ("PermissionDenied", message) in kube.events())
            # Backoff, not a loop: the timer (every second when all is well) and the create
            # handler each try at 0, 1, 3, 7 s.
            time.sleep(5)
            tries = refused_requests(kube, user, started, verb="create", resource="rayclusters")
            assert 2 <= len(tries) <= 7, len(tries)
            assert reasons(kube).count("PermissionDenied") == 1  # said once
        wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER), timeout_s=20)
        body = wait_phase(kube, "Provisioning", timeout_s=20)
        condition = ready(kube)
        assert (condition["status"], condition["reason"]) == ("False", "Provisioning")
        assert body["status"]["message"] == f"creating RayCluster {CLUSTER}"
        wait_for("the events", lambda: "Provisioning" in reasons(kube))
        assert reasons(kube) == ["PermissionDenied", "Permitted", "Provisioning"]
    finally:
        runner.stop()


@pytest.mark.parametrize("events", ["allowed", "refused"])
def test_a_refused_status_write_is_said_by_an_event_or_the_log(
    kube, kuberay, operator_account, monkeypatch, caplog, events
):
    operator_ns, account, user, role = operator_account
    monkeypatch.setattr(kube_module, "RETRY_DELAY_S", 1)
    kubeconfig = str(kube.plane.service_account_kubeconfig(operator_ns, account))
    calls = [("rltrainer.io", "rlexperiments/status", "patch")]
    if events == "refused":
        calls.append(("", "events", "create"))
    runner = start(kube, kubeconfig=kubeconfig)
    said = f"patch RLExperiment {kube.ns}/{NAME} status refused (HTTP 403 Forbidden): {user} may not patch "
    try:
        with revoked(kube, role, *calls):
            apply(kube, experiment_manifest())
            wait_for("the RayCluster", lambda: kuberay.get(kube.ns, CLUSTER))  # the step went through
            logged = wait_for(
                "kopf's log line",
                lambda: [r.getMessage() for r in caplog.records if said in r.getMessage()],
            )
            assert " 'reconcile' failed temporarily: " in logged[0]  # kopf's Handler or Timer
            if events == "allowed":
                event = wait_for(
                    "the Warning event",
                    lambda: [m for r, m in kube.events() if r == "PermissionDenied" and m.startswith(said)],
                )
                assert "kubectl auth can-i patch rlexperiments.rltrainer.io --subresource=status" in event[0]
            else:
                time.sleep(3)  # tries on a backoff: a few lines, no event
                assert kube.events() == []
                assert 2 <= len([r for r in caplog.records if said in r.getMessage()]) <= 12
            assert (get_experiment(kube).get("status") or {}).get("phase") is None  # nothing written
        assert wait_phase(kube, "Provisioning", timeout_s=20)["status"]["rayClusterName"] == CLUSTER
    finally:
        runner.stop()


def unauthorized(kube: Any, since: float) -> list[dict[str, Any]]:
    """The API server's 401 answers since ``since`` (a ``time.time()``): its audit log records
    a failed authentication at stage ResponseStarted, which ``audit_events`` leaves out."""
    found = []
    with kube.plane.audit_log.open() as lines:
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                code = event.get("responseStatus", {}).get("code")
                if code == 401 and _seconds(event["requestReceivedTimestamp"]) >= since:
                    found.append(event)
    return found


def _seconds(timestamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_a_revoked_token_is_one_log_line_a_try_and_the_operator_stays_up(kube, operator_account, caplog):
    operator_ns, account, user, _ = operator_account
    kubeconfig = str(kube.plane.service_account_kubeconfig(operator_ns, account))
    runner = start(kube, kubeconfig=kubeconfig)
    try:
        apply(kube, experiment_manifest())
        wait_phase(kube, "Provisioning")
        revoked_at = time.time()
        kube.core.delete_namespaced_service_account(account, operator_ns)  # its token goes with it
        said = f"the API server does not accept the operator's credentials ({user}) (HTTP 401 Unauthorized"
        logged = wait_for(
            "the log line", lambda: [r for r in caplog.records if said in r.getMessage()], timeout_s=20
        )
        line = logged[0].getMessage()
        assert line.startswith("Activity 'credentials' failed temporarily: authenticate refused")
        assert line.endswith("trying again in 10s")
        time.sleep(8)
        assert runner._thread.is_alive() and runner._error is None  # kopf did not stop on LoginError
        assert len([r for r in caplog.records if said in r.getMessage()]) == 1  # the next try is at 10 s
        # Not hammering: kopf's calls wait for the login; the reconciles back off (10 s, 20 s, ...).
        answered = unauthorized(kube, revoked_at)
        assert 1 <= len(answered) <= 8, [(e["userAgent"], e["requestURI"]) for e in answered]
    finally:
        runner.stop()
