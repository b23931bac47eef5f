"""The Kubernetes access module on the real API server: idempotent creates and deletes, API
failures as kopf retries, the operator's user agent in the server's audit log."""

from __future__ import annotations

import json
import socket

import kopf
import kubernetes
import pytest
import yaml
from conftest import wait_for
from test_builders import DATA, SETTINGS

import rltrainer_operator.kube as kube_module
from rltrainer_operator.builders.raycluster import build_raycluster
from rltrainer_operator.kube import Kube, make_api_client
from rltrainer_operator.models import RLExperiment


@pytest.fixture
def kube_api(kube):
    client = make_api_client(kubeconfig=kube.kubeconfig)
    yield Kube(client)
    client.close()


@pytest.fixture
def raycluster(kube):
    body = yaml.safe_load((DATA / "cpu_only.input.yaml").read_text())
    body["metadata"]["namespace"] = kube.ns

    def build() -> dict:
        cluster = build_raycluster(body, RLExperiment.model_validate(body).spec, SETTINGS)
        # Its owner (the experiment in DATA) does not exist on this server: with the owner
        # reference kept, the garbage collector would delete the cluster mid-test.
        cluster["metadata"].pop("ownerReferences", None)
        return cluster

    return build


def test_create_is_idempotent(kube_api, raycluster):
    first = kube_api.create_raycluster(raycluster())
    again = kube_api.create_raycluster(raycluster())  # 409 from the API: the existing one
    assert again["metadata"]["uid"] == first["metadata"]["uid"]


def test_absent_objects_are_none_or_false(kube, kube_api):
    assert kube_api.get_raycluster(kube.ns, "nope") is None
    assert kube_api.delete_raycluster(kube.ns, "nope") is False
    assert kube_api.delete_experiment(kube.ns, "nope") is False
    kube_api.patch_experiment_status(kube.ns, "nope", {"phase": "Running"})  # deleted meanwhile: no error


def test_invalid_objects_and_unreachable_apis_become_kopf_retries(kube, kube_api, raycluster):
    bad = raycluster()
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(
        kopf.TemporaryError, match=f"create RayCluster {kube.ns}/rlx-cartpole failed: HTTP 422"
    ):
        kube_api.create_raycluster(bad)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    offline = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration(host=closed)))
    offline.custom.api_client.configuration.retries = 0
    with pytest.raises(kopf.TemporaryError, match="get RayCluster ml/x failed"):
        offline.get_raycluster("ml", "x")
    offline.api_client.close()


def test_missing_resources_names_what_to_install(kube_api, monkeypatch):
    assert kube_api.missing_resources() == []  # both CRDs are installed on the session's server
    wanted = (*kube_module.REQUIRED_RESOURCES, ("example.io", "v1", "widgets", "install widgets"))
    monkeypatch.setattr(kube_module, "REQUIRED_RESOURCES", wanted)
    assert kube_api.missing_resources() == ["widgets.example.io/v1 (install widgets)"]


def test_operator_requests_carry_its_user_agent(kube, kube_api):
    kube_api.get_raycluster(kube.ns, "x")
    wait_for("the audit event", lambda: kube.requests(verb="get", resource="rayclusters"))
    [event] = kube.requests(verb="get", resource="rayclusters")
    assert event["userAgent"].startswith("rltrainer-operator/")


class _OpenAPIAnswer:
    def __init__(self, status: int, document: dict) -> None:
        self.status, self.data = status, json.dumps(document).encode()

    def read(self) -> None:
        pass


class _OpenAPIClient:
    """Answers the OpenAPI v3 document request with ``status`` and ``document``."""

    def __init__(self, status: int, document: dict) -> None:
        self.answer = _OpenAPIAnswer(status, document)

    def param_serialize(self, method, path, **_):
        return method, path, {}, None, []

    def call_api(self, *_, **__):
        return self.answer


def _raycluster_schema(auth_options: dict) -> dict:
    spec = {"properties": {"authOptions": {"properties": auth_options}}}
    return {"components": {"schemas": {"io.ray.v1.RayCluster": {"properties": {"spec": spec}}}}}


@pytest.mark.parametrize(
    ("status", "document", "too_old"),
    [
        (200, _raycluster_schema({"mode": {}, "secretName": {}}), False),  # v1.6+
        (200, _raycluster_schema({"mode": {}}), True),  # v1.5: no secretName
        (200, {"components": {"schemas": {}}}, False),  # no RayCluster schema: cannot tell
        (403, {}, False),  # discovery restricted: cannot tell, start anyway
        (404, {}, False),  # OpenAPI v3 off
    ],
)
def test_the_kuberay_floor_is_judged_only_from_a_schema_it_can_read(status, document, too_old):
    said = Kube(_OpenAPIClient(status, document)).kuberay_below_floor()
    assert (said is not None) == too_old, said
    if too_old:
        assert "older than v1.6.0" in said and "authOptions.secretName" in said
