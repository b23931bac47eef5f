"""Fixtures for operator tests: the Kubernetes API stand-in, a fake Ray job API, a fake KubeRay.

- ``kube``: a ``KubeAPIServer`` (kmock + the semantics in ``testing/kapi.py``) with the
  RLExperiment CRD (ours) and the RayCluster CRD (KubeRay v1.7.0's, in ``data/kuberay``)
  declared, validating every write against their schemas, and a ``KUBECONFIG`` pointing at it.
- ``ray_api``: Ray's job REST API on 127.0.0.1 with jobs whose state a test sets.
- ``kuberay``: writes RayCluster status the way KubeRay does (ready, head lost).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from rltrainer_operator.testing.fakes import MERGE, FakeKubeRay, FakeRayJobs
from rltrainer_operator.testing.kapi import RAYCLUSTERS, RLX, KubeAPIServer
from rltrainer_operator.testing.schema import validator_for

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
RLX_CRD = ROOT / "crds" / "rltrainer.io_rlexperiments.yaml"
RAYCLUSTER_CRD = DATA / "kuberay" / "ray.io_rayclusters.yaml"


def declare_resources(api: Any) -> None:
    api.declare(RLX, "RLExperiment", shortnames=("rlx",), validator=validator_for(str(RLX_CRD), "v1alpha1"))
    api.declare(RAYCLUSTERS, "RayCluster", validator=validator_for(str(RAYCLUSTER_CRD), "v1"))


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """The API server; ``kube.client`` is a CustomObjectsApi on it, ``kube.url`` its address."""
    with KubeAPIServer(declare_resources) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kmock", "cluster": {"server": server.url}}],
                    "users": [{"name": "kmock", "user": {"token": "test"}}],
                    "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
                    "current-context": "kmock",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        api_client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=server.url))
        server.client = kubernetes.client.CustomObjectsApi(api_client)
        try:
            yield server
        finally:
            api_client.close()


@pytest.fixture
def ray_api():
    fake = FakeRayJobs()
    yield fake
    fake.close()


@pytest.fixture
def kuberay(kube, ray_api):
    return FakeKubeRay(kube.client, ray_api.port)


# --- experiments ------------------------------------------------------------------------------


def experiment_manifest(name: str = "cartpole", namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    base = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "config": {"train_batch_size": 256},
        "stop": {"training_iteration": 10},
        "checkpoint": {"uri": "s3://checkpoints/rl"},
        "learners": {"replicas": 1},
        "rollouts": {"replicas": 2},
    }
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**base, **spec},
    }


def apply(kube: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """``kubectl apply`` of a new experiment: what the API server stored."""
    meta = manifest["metadata"]
    return kube.client.create_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", meta["namespace"], "rlexperiments", manifest
    )


def get_experiment(kube: Any, name: str = "cartpole", namespace: str = "ml") -> dict[str, Any]:
    return kube.client.get_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace, "rlexperiments", name
    )


def patch_spec(
    kube: Any, spec: dict[str, Any], name: str = "cartpole", namespace: str = "ml"
) -> dict[str, Any]:
    return kube.client.patch_namespaced_custom_object(
        "rltrainer.io", "v1alpha1", namespace, "rlexperiments", name, {"spec": spec}, _content_type=MERGE
    )
