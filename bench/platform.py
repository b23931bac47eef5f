"""The platform on real Pods against the process stand-in: the same experiment, the same operator.

    python -m bench.platform                      # both, 100 iterations each (as root, after make images)
    python -m bench.platform --modes pods --iterations 60

For each mode, a ``LocalStack`` (a real control plane and a real S3 server, SeaweedFS;
``pods``: two real nodes with KubeRay's own operator making the Pods from the trainer image, S3
on the pod network's gateway;
``processes``: the ``LocalKubeRay`` stand-in's local Ray processes) and the real operator (kopf,
1 s poll), then ``kubectl apply`` of PPO on CartPole-v1 with tuned_examples/ppo_cartpole.yaml's
recipe, 1 learner and 2 rollout workers of half a CPU each (so the pods fit two 2-CPU nodes; the
learner on the GPU node by its selector and toleration, with ``_fake_gpus``). Figures:

- seconds from apply to Running (driver submitted) and to the first iteration in the status;
- the driver's seconds per iteration: the median ``time_this_iter_s`` of its ``result.json`` in S3
  (sampling on the rollout pods, the update on the learner pod, the weights back: what the pods'
  network and placement add shows here);
- the operator's own time per reconcile while Running (kopf's handler, timed in process), which is
  the operator's overhead per tick whatever runs the pods.

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import time
from typing import Any

from bench.common import median, print_json_line

BUCKET = "bench-platform"
RECIPE = {
    "seed": 0,
    "rollout_fragment_length": 32,
    "train_batch_size": 256,
    "minibatch_size": 256,
    "num_epochs": 20,
    "gamma": 0.98,
    "lambda": 0.8,
    "lr": 0.0003,
    "clip_param": 0.2,
    "entropy_coeff": 0.0,
    "kl_coeff": 0.0,
    "vf_clip_param": 10000.0,
    "model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
}


def spec(stack: Any, iterations: int, pods: bool, image: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "algorithm": "PPO",
        "env": "CartPole-v1",
        "config": dict(RECIPE),
        "stop": {"training_iteration": iterations},
        "checkpoint": {"uri": f"s3://{BUCKET}/runs", "frequency": 5},
        "storage": {
            "endpointURL": stack.s3_endpoint,
            "region": "us-east-1",
            "credentialsSecretRef": {"name": "s3"},
        },
        "head": {"cpu": "500m", "memory": "3Gi"},
        "learners": {"replicas": 1, "cpusPerLearner": 0.5, "memory": "1536Mi"},
        "rollouts": {"replicas": 2, "cpusPerRunner": 0.5, "envsPerRunner": 4, "memory": "1536Mi"},
    }
    if pods:
        body.update(image=image, imagePullPolicy="Never")
        body["learners"].update(
            gpusPerLearner=1,
            nodeSelector={"nvidia.com/gpu.present": "true"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
        body["config"]["_fake_gpus"] = True
    return body


def iteration_seconds(endpoint: str) -> list[float]:
    """Every iteration's ``time_this_iter_s`` from the experiment's ``result.json`` in S3."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    keys = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="runs/bench/ppo/")
        for item in page.get("Contents", [])
        if item["Key"].endswith("/result.json")
    ]
    rows = s3.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read().decode().splitlines()
    return [json.loads(row)["time_this_iter_s"] for row in rows if row.strip()][1:]  # not the first


def run(mode: str, iterations: int) -> dict[str, Any]:
    import kubernetes

    from rltrainer_operator.settings import Settings
    from rltrainer_operator.testing.local_stack import (
        NODE_IMAGE_STORE,
        REGION,
        LocalStack,
        trainer_image,
    )
    from rltrainer_operator.testing.runner import OperatorRunner

    pods = mode == "pods"
    options = (
        {"start_nodes": True, "images": [trainer_image()], "image_store": NODE_IMAGE_STORE} if pods else {}
    )
    stack = LocalStack(s3_bucket=BUCKET, **options).start()
    # The operator (and this benchmark's reads) with the operator's identity; the pods with theirs.
    os.environ.update({**stack.s3_credentials("operator"), "AWS_DEFAULT_REGION": REGION})
    os.environ["AWS_ENDPOINT_URL"] = stack.s3_endpoint
    reconciles: list[float] = []
    settings = Settings(poll_interval_s=1, metrics_port=0, ray_token_key="bench-platform-key")
    operator = None
    try:
        operator = OperatorRunner(kubeconfig=stack.kubeconfig, namespaces=None, settings=settings).start()
        reconciler = operator.memo.reconciler
        timed = reconciler.reconcile

        def reconcile(body: dict[str, Any]) -> Any:
            started = time.perf_counter()
            try:
                return timed(body)
            finally:
                if ((body.get("status") or {}).get("phase")) == "Running":
                    reconciles.append(time.perf_counter() - started)

        reconciler.reconcile = reconcile
        plane = stack.plane
        plane.kubectl_run("create", "namespace", "bench")
        secret = {
            k: base64.b64encode(v.encode()).decode() for k, v in stack.s3_credentials("trainer").items()
        }
        kubernetes.client.CoreV1Api(stack.api_client).create_namespaced_secret(
            "bench", {"metadata": {"name": "s3"}, "data": secret}
        )
        body = {
            "apiVersion": "rltrainer.io/v1alpha1",
            "kind": "RLExperiment",
            "metadata": {"name": "ppo", "namespace": "bench"},
            "spec": spec(stack, iterations, pods, trainer_image()),
        }
        custom = kubernetes.client.CustomObjectsApi(stack.api_client)
        applied = time.monotonic()
        plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(body))
        seen: dict[int, float] = {}
        running_at = None
        while True:
            status = custom.get_namespaced_custom_object(
                "rltrainer.io", "v1alpha1", "bench", "rlexperiments", "ppo"
            ).get("status", {})
            now = time.monotonic() - applied
            if status.get("phase") == "Running" and running_at is None:
                running_at = now
            if status.get("iteration"):
                seen.setdefault(int(status["iteration"]), now)
            if status.get("phase") in ("Succeeded", "Failed") or now > 900:
                break
            time.sleep(0.5)
        if status.get("phase") != "Succeeded":
            raise SystemExit(f"{mode}: the experiment ended {status.get('phase')}: {status.get('message')}")
        first = min(seen)
        per_iteration = median(iteration_seconds(stack.s3_endpoint))
        plane.kubectl_run("delete", "rlx", "-n", "bench", "ppo", "--timeout=120s")
        return {
            "mode": mode,
            "apply_to_running_s": round(running_at, 1),
            "apply_to_first_iteration_s": round(seen[first], 1),
            "driver_s_per_iteration": round(per_iteration, 3),
            "operator_ms_per_reconcile_running": round(1000 * median(reconciles), 1) if reconciles else None,
        }
    finally:
        if operator is not None:
            operator.stop()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="processes,pods")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    rows = [run(mode, args.iterations) for mode in args.modes.split(",")]
    for row in rows:
        print(
            f"{row['mode']:>9}: apply->Running {row['apply_to_running_s']} s, apply->first iteration "
            f"{row['apply_to_first_iteration_s']} s, {row['driver_s_per_iteration']} s per iteration, "
            f"operator {row['operator_ms_per_reconcile_running']} ms per reconcile while Running"
        )
    print_json_line({"benchmark": "platform", "iterations": args.iterations, "runs": rows})


if __name__ == "__main__":
    main()
