"""The operator's rights taken away: the API server's refusals (403: an RBAC rule missing; 401:
its credentials no longer accepted) as messages that say whose call, what was refused, where, and
what to do, tried again with backoff; an experiment's Ready condition says the refusal until a
reconcile goes through.
"""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import ANY

from kubernetes.client.exceptions import ApiException
from test_handlers import CLUSTER
from test_reconciler import Operator, condition, start_running

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
