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
- ``watch`` on RLExperiments refused, at startup or later (kopf's own watch then gets 403): the
  operator's SelfSubjectAccessReviews name what is missing in one log line and a Warning event on
  its Pod, ``/readyz`` answers 503, kopf retries its watch past its default nine tries instead of
  ending the process; granted again, it reconciles the experiment made meanwhile, no restart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import pytest
from conftest import apply, experiment_manifest, get_experiment, wait_for
from kubernetes.client.exceptions import ApiException
from test_handlers import CLUSTER, NAME, start, wait_phase
from test_rbac import install_rbac
from test_reconciler import Operator, condition, start_running

import rltrainer_operator.handlers as handlers_module
import rltrainer_operator.kube as kube_module
import rltrainer_operator.permissions as permissions_module
from rltrainer_operator.builders.event import MAX_MESSAGE, build_pod_event
from rltrainer_operator.handlers import RetryForever
from rltrainer_operator.kube import CredentialsRefused, PermissionDenied, refused, refused_delay
from rltrainer_operator.permissions import API_CALLS, Access, describe, needed
from rltrainer_operator.settings import Settings
from rltrainer_operator.testing.envtest import free_port


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


def test_kopfs_own_calls_are_tried_again_forever():
    backoffs = RetryForever()
    assert list(itertools.islice(backoffs, 8)) == [1, 2, 4, 8, 16, 30, 30, 30]
    assert list(itertools.islice(backoffs, 2)) == [1, 2]  # anew for each call


def test_the_needed_calls_are_the_table_in_each_watched_namespace():
    cluster_wide = needed(None, own_namespace="ops")
    assert len(cluster_wide) == sum(len(verbs) for verbs in API_CALLS.values())
    assert {access.namespace for access in cluster_wide} == {None}
    assert Access("watch", "rltrainer.io", "rlexperiments", None) in cluster_wide
    namespaced = needed(["ml", "rl"], own_namespace="ops")
    assert {access.namespace for access in namespaced} == {"ml", "rl", "ops"}
    assert [access for access in namespaced if access.namespace == "ops"] == [
        Access("create", "", "events", "ops")
    ]
    assert "ops" not in {access.namespace for access in needed(["ops", "ml"], own_namespace="ops")[-1:]}
    assert Settings(watch_namespaces="ml, rl").namespaces(clusterwide=False) == ["ml", "rl"]
    assert Settings(watch_namespaces="ml").namespaces(clusterwide=True) is None


def test_what_is_missing_is_one_line_naming_each_call_and_the_check():
    user = "system:serviceaccount:ops:rlx"
    missing = [
        Access("watch", "rltrainer.io", "rlexperiments", "ml"),
        Access("list", "ray.io", "rayclusters", "ml"),
        Access("patch", "rltrainer.io", "rlexperiments/status", "rl"),
        Access("create", "", "events", None),
    ]
    assert describe(missing, user) == (
        f"the operator lacks RBAC permissions it needs: {user} may not watch "
        "rlexperiments.rltrainer.io, list rayclusters.ray.io in namespace ml; patch "
        "rlexperiments.rltrainer.io/status in namespace rl; create events cluster-wide; the operator "
        "waits, not ready, and checks again every 10 s; the Helm chart's ClusterRole (or Role, when "
        "it watches given namespaces) grants these: restore it (helm upgrade the release) and check "
        f"with kubectl auth can-i watch rlexperiments.rltrainer.io -n ml --as={user}"
    )
    assert missing[2].can_i(user) == (
        f"kubectl auth can-i patch rlexperiments.rltrainer.io --subresource=status -n rl --as={user}"
    )
    assert missing[3].can_i("") == "kubectl auth can-i create events --all-namespaces"


def test_the_pod_event_names_the_pod_by_uid():
    pod = {"name": "rlx-op-1", "namespace": "ops", "uid": "u-1"}
    event = build_pod_event(pod, "Warning", "PermissionDenied", "x" * 2000)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "rlx-op-1",
        "namespace": "ops",
        "uid": "u-1",
    }
    assert event["metadata"] == {"generateName": "rlx-op-1.", "namespace": "ops"}
    assert len(event["message"]) == MAX_MESSAGE and event["message"].endswith("...")
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "PermissionDenied", 1)


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


# --- kopf's own watch refused ------------------------------------------------------------------
def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def pod_events(kube: Any, namespace: str, pod: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events on the Pod ``pod``, oldest first."""
    items = kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    items.sort(key=lambda e: int(e.metadata.resource_version))
    return [(e.type, e.reason, e.message) for e in items]


def kopf_lines(caplog: Any) -> list[str]:
    """kopf's log lines of its own refused watch of RLExperiments."""
    return [
        message
        for message in (r.getMessage() for r in caplog.records)
        if message.startswith("Request attempt #")
        and "/rlexperiments?" in message
        and "watch=true" in message
        and "APIForbiddenError" in message
    ]


@pytest.mark.parametrize("when", ["at startup", "while running"])
def test_a_refused_watch_is_said_the_operator_stays_up_not_ready_and_carries_on(
    kube, operator_account, monkeypatch, caplog, when
):
    operator_ns, account, user, role = operator_account
    monkeypatch.setattr(permissions_module, "RECHECK_MISSING_S", 1)
    monkeypatch.setattr(permissions_module, "CHECK_INTERVAL_S", 1)
    # kopf's tries of its watch every 0.5 s (30 s in production): past its default 9 in seconds.
    monkeypatch.setattr(handlers_module, "API_RETRY_DELAYS_S", ())
    monkeypatch.setattr(handlers_module, "API_RETRY_MAX_S", 0.5)
    pod = {
        "name": f"{account}-5d8f-x2x",
        "namespace": operator_ns,
        "uid": "6f1c7a04-0000-4000-8000-000000000001",
    }
    for name, value in (("POD_NAME", pod["name"]), ("POD_NAMESPACE", operator_ns), ("POD_UID", pod["uid"])):
        monkeypatch.setenv(name, value)
    port = free_port()
    # A watch silent for 2 s is opened again: kopf meets the refusal at once, not in 5-10 min.
    settings = dataclasses.replace(
        Settings.from_env(), metrics_port=0, readiness_port=port, watch_stall_timeout_s=2
    )
    kubeconfig = str(kube.plane.service_account_kubeconfig(operator_ns, account))
    said = (
        f"the operator lacks RBAC permissions it needs: {user} may not watch rlexperiments.rltrainer.io "
        f"in namespace {kube.ns}; the operator waits, not ready, and checks again every 1 s; the Helm "
        "chart's ClusterRole (or Role, when it watches given namespaces) grants these: restore it "
        f"(helm upgrade the release) and check with kubectl auth can-i watch rlexperiments.rltrainer.io "
        f"-n {kube.ns} --as={user}"
    )
    runner = None
    try:
        if when == "while running":
            runner = start(kube, kubeconfig=kubeconfig, settings=settings)
            assert readyz(port) == (200, "ok")
        since = time.time()
        with revoked(kube, role, ("rltrainer.io", "rlexperiments", "watch")):
            if runner is None:
                runner = start(kube, kubeconfig=kubeconfig, settings=settings)
            logged = wait_for("the log line", lambda: [r for r in caplog.records if r.getMessage() == said])
            assert logged[0].levelname == "ERROR" and logged[0].name == "rltrainer_operator.permissions"
            assert readyz(port) == (503, said)
            wait_for("the Pod's event", lambda: pod_events(kube, operator_ns, pod["name"]))
            assert pod_events(kube, operator_ns, pod["name"]) == [("Warning", "PermissionDenied", said)]

            def tries() -> list[dict[str, Any]]:
                return refused_requests(kube, user, since, verb="watch", resource="rlexperiments")

            wait_for("kopf's refused watch", tries)
            apply(kube, experiment_manifest())  # kopf cannot see it: its watch is refused
            wait_for("kopf's 10th try of its watch", lambda: len(tries()) >= 10)
            assert runner._thread.is_alive() and runner._error is None  # past kopf's default 9 tries
            assert len(kopf_lines(caplog)) == 1  # its line of each try: once a minute
            assert (get_experiment(kube).get("status") or {}).get("phase") is None
            assert readyz(port)[0] == 503
            assert len([r for r in caplog.records if r.getMessage() == said]) == 1  # once a minute
            granted = time.monotonic()
        # The ClusterRole restored: the experiment made meanwhile is reconciled, no restart.
        wait_phase(kube, "Provisioning", timeout_s=20)
        reconciled_s = time.monotonic() - granted
        wait_for("ready", lambda: readyz(port) == (200, "ok"), timeout_s=10)
        wait_for("the Permitted event", lambda: len(pod_events(kube, operator_ns, pod["name"])) == 2)
        assert pod_events(kube, operator_ns, pod["name"])[1] == (
            "Normal",
            "Permitted",
            "the operator's RBAC grants every call it makes again: it carries on",
        )
    finally:
        if runner is not None:
            runner.stop()
    assert reconciled_s < 5, reconciled_s
