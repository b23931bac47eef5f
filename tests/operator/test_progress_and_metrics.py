"""The operator's two outward-facing readers and writers: progress from S3, metrics over HTTP."""

from __future__ import annotations

import json
import urllib.request

from rltrainer.storage import open_storage
from rltrainer_operator.metrics import Metrics
from rltrainer_operator.models import RLExperiment
from rltrainer_operator.progress import progress_reader
from rltrainer_operator.settings import Settings
from tests.test_storage import BUCKET, free_port, s3_endpoint  # noqa: F401 - the moto fixture


def spec_for(endpoint: str):
    return RLExperiment.model_validate(
        {
            "spec": {
                "algorithm": "PPO",
                "env": "CartPole-v1",
                "checkpoint": {"uri": f"s3://{BUCKET}/operator"},
                "storage": {"endpointURL": endpoint, "region": "us-east-1"},
            }
        }
    ).spec


def test_progress_is_read_from_the_experiment_folder_in_s3(s3_endpoint):  # noqa: F811
    read = progress_reader(Settings())
    spec = spec_for(s3_endpoint)
    assert read(spec, "ml", "cartpole") is None  # nothing written yet
    progress = {"iteration": 4, "timesteps": 16000, "last_checkpoint": "s3://x/checkpoint_000004"}
    open_storage(f"s3://{BUCKET}/operator/ml/cartpole").write_bytes(
        "progress.json", json.dumps(progress).encode()
    )
    assert read(spec, "ml", "cartpole") == progress
    assert read(spec, "other-namespace", "cartpole") is None


def test_metrics_are_served_and_count_phases():
    metrics = Metrics()
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    try:
        metrics.observe_phase("a", "Running")
        metrics.observe_phase("b", "Running")
        metrics.observe_phase("b", "Succeeded")
        metrics.observe_phase("c", "Failed")
        metrics.observe_phase("c", None)
        metrics.restarts.inc()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics.close()
    assert 'rltrainer_experiments{phase="Running"} 1.0' in text
    assert 'rltrainer_experiments{phase="Succeeded"} 1.0' in text
    assert 'rltrainer_experiments{phase="Failed"} 0.0' in text
    assert "rltrainer_experiment_restarts_total 1.0" in text
    assert "rltrainer_reconcile_duration_seconds_count" in text
