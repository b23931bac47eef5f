"""The Kubernetes access module: idempotent creates and deletes, API failures as kopf retries."""

from __future__ import annotations

import socket

import kopf
import pytest
import yaml
from test_builders import DATA, SETTINGS

from rltrainer_operator.builders.raycluster import build_raycluster
from rltrainer_operator.kube import Kube, make_api_client
from rltrainer_operator.models import RLExperiment


@pytest.fixture
def kube_api(kube):
    client = make_api_client(kube.url)
    yield Kube(client)
    client.close()


def raycluster() -> dict:
    body = yaml.safe_load((DATA / "cpu_only.input.yaml").read_text())
    return build_raycluster(body, RLExperiment.model_validate(body).spec, SETTINGS)


def test_create_is_idempotent(kube_api):
    first = kube_api.create_raycluster(raycluster())
    again = kube_api.create_raycluster(raycluster())  # 409 from the API: the existing one
    assert again["metadata"]["uid"] == first["metadata"]["uid"]


def test_absent_objects_are_none_or_false(kube_api):
    assert kube_api.get_raycluster("ml", "nope") is None
    assert kube_api.delete_raycluster("ml", "nope") is False
    assert kube_api.delete_experiment("ml", "nope") is False
    kube_api.patch_experiment_status("ml", "nope", {"phase": "Running"})  # deleted meanwhile: no error


def test_invalid_objects_and_unreachable_apis_become_kopf_retries(kube_api):
    bad = raycluster()
    bad["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(kopf.TemporaryError, match="create RayCluster ml/rlx-cartpole failed: HTTP 422"):
        kube_api.create_raycluster(bad)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    offline = Kube(make_api_client(closed))
    offline.custom.api_client.configuration.retries = 0
    with pytest.raises(kopf.TemporaryError, match="get RayCluster ml/x failed"):
        offline.get_raycluster("ml", "x")
    offline.api_client.close()


def test_operator_requests_carry_its_user_agent(kube, kube_api):
    kube_api.get_raycluster("ml", "x")
    agents = {(r.headers or {}).get("User-Agent") for r in kube.api.requests}
    assert any(agent.startswith("rltrainer-operator/") for agent in agents if agent)
