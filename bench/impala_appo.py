"""IMPALA / APPO on CartPole-v1: env steps per second against the number of env runners, and
time to solve, for rltrainer and for RLlib 2.60 (its own virtualenv, as ``bench/anchors.py``
describes) with the same env, network and batch settings (``tuned_examples/appo_cartpole.yaml``).

    python -m bench.impala_appo throughput --algo APPO --runners 0,1,2 [--seconds 20]
    /tmp/anchors-venv/bin/python -m bench.impala_appo throughput --lib rllib --algo APPO --runners 0,1,2
    /tmp/anchors-venv/bin/python -m bench.impala_appo solve --lib rllib --seeds 3
    python -m bench.time_to_solve --algo APPO --env CartPole-v1 --seeds 3 --budget 2000000   # rltrainer's
    python -m bench.impala_appo throughput --runners 1,2,4,8 --raylets   # a multi-raylet local cluster

Each measurement runs in a fresh process. Throughput is env steps sampled (and trained) per
second of wall time over ``--seconds`` after a first iteration that starts the actors.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from typing import Any

# tuned_examples/appo_cartpole.yaml, in both libraries' words.
SETTINGS = {
    "num_envs_per_env_runner": 8,
    "rollout_fragment_length": 50,
    "train_batch_size": 500,
    "lr": 0.001,
    "num_epochs": 2,
    "vf_loss_coeff": 0.1,
    "entropy_coeff": 0.0,
    "hiddens": [64, 64],
    "activation": "relu",
}


def multi_raylet_cluster(runners: int) -> Any:
    """A local Ray cluster of one raylet for the driver and learner plus one raylet per env
    runner (each with 1 logical CPU), the env runners placed one per raylet (SPREAD)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(runners):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    _CLUSTERS.append(cluster)
    return cluster


_CLUSTERS: list[Any] = []  # shut down at the end of the measurement


def rltrainer_algo(algo: str, runners: int, seed: int, raylets: bool = False) -> tuple[Any, Any]:
    from rltrainer.algorithms.registry import get_config_class

    s = SETTINGS
    config = get_config_class(algo)().update_from_dict(
        {
            "env": "CartPole-v1",
            "num_env_runners": runners,
            "num_envs_per_env_runner": s["num_envs_per_env_runner"],
            "rollout_fragment_length": s["rollout_fragment_length"],
            "train_batch_size": s["train_batch_size"],
            "lr": s["lr"],
            "num_epochs": s["num_epochs"],
            "vf_loss_coeff": s["vf_loss_coeff"],
            "entropy_coeff": s["entropy_coeff"],
            "min_time_s_per_iteration": 1.0,
            "metrics_num_episodes_for_smoothing": 20,
            "model": {"fcnet_hiddens": s["hiddens"], "fcnet_activation": s["activation"]},
            "seed": seed,
            **({"placement_strategy": "SPREAD"} if raylets else {}),
        }
    )
    if raylets:
        multi_raylet_cluster(runners)
    algo_ = config.build()

    def counts(result: dict[str, Any]) -> tuple[int, int, float]:
        return (
            result["num_env_steps_sampled_lifetime"],
            result["num_env_steps_trained_lifetime"],
            result["episode_return_mean"],
        )

    return algo_, counts


def rllib_algo(algo: str, runners: int, seed: int) -> tuple[Any, Any]:
    import ray
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        EPISODE_RETURN_MEAN,
        LEARNER_RESULTS,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_TRAINED_LIFETIME,
    )

    # RLlib's learner is an actor of its own (1 CPU) besides the env runners: as many logical
    # CPUs as it asks for, as rltrainer's driver takes its runners' bundles on this machine too.
    ray.init(address="local", include_dashboard=False, num_cpus=runners + 2)
    s = SETTINGS
    config = (
        (APPOConfig if algo == "APPO" else IMPALAConfig)()
        .environment("CartPole-v1")
        .env_runners(
            num_env_runners=runners,
            num_envs_per_env_runner=s["num_envs_per_env_runner"],
            rollout_fragment_length=s["rollout_fragment_length"],
        )
        .training(
            train_batch_size_per_learner=s["train_batch_size"],
            lr=s["lr"],
            num_epochs=s["num_epochs"],
            vf_loss_coeff=s["vf_loss_coeff"],
            entropy_coeff=s["entropy_coeff"],
        )
        .rl_module(
            model_config=DefaultModelConfig(fcnet_hiddens=s["hiddens"], fcnet_activation=s["activation"])
        )
        .reporting(min_time_s_per_iteration=1.0, metrics_num_episodes_for_smoothing=20)
        .debugging(seed=seed)
    )
    algo_ = config.build_algo()

    def counts(result: dict[str, Any]) -> tuple[int, int, float]:
        runners_ = result.get(ENV_RUNNER_RESULTS, {})
        learners = result.get(LEARNER_RESULTS, {}).get("__all_modules__", {})
        return (
            int(runners_.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)),
            int(learners.get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)),
            float(runners_.get(EPISODE_RETURN_MEAN, math.nan)),
        )

    return algo_, counts


def one_throughput(
    lib: str, algo: str, runners: int, seconds: float, raylets: bool = False
) -> dict[str, Any]:
    if lib == "rltrainer":
        algorithm, counts = rltrainer_algo(algo, runners, 0, raylets)
    else:
        algorithm, counts = rllib_algo(algo, runners, 0)
    try:
        sampled0, trained0, _ = counts(algorithm.train())  # actors started, first batches in
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            sampled, trained, _ = counts(algorithm.train())
        elapsed = time.perf_counter() - start
    finally:
        algorithm.stop()
        for cluster in _CLUSTERS:
            import ray

            ray.shutdown()
            cluster.shutdown()
    return {
        "lib": lib,
        "algo": algo,
        "runners": runners,
        "raylets": raylets,
        "sampled_per_s": (sampled - sampled0) / elapsed,
        "trained_per_s": (trained - trained0) / elapsed,
    }


def one_solve(lib: str, algo: str, seed: int, budget: int, target: float) -> dict[str, Any]:
    started = time.time()
    make = rltrainer_algo if lib == "rltrainer" else rllib_algo
    algorithm, counts = make(algo, 2, seed)
    try:
        while True:
            sampled, _, episode_return = counts(algorithm.train())
            if episode_return >= target or sampled >= budget:
                break
    finally:
        algorithm.stop()
    return {
        "lib": lib,
        "seed": seed,
        "seconds": time.time() - started,
        "steps": sampled,
        "solved": bool(episode_return >= target),
    }


def in_fresh_process(kind: str, **kwargs: Any) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.impala_appo", "_one", kind, json.dumps(kwargs)]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"{kind} {kwargs} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["throughput", "solve", "_one"])
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--lib", choices=["rltrainer", "rllib"], default="rltrainer")
    parser.add_argument("--algo", choices=["APPO", "IMPALA"], default="APPO")
    parser.add_argument("--runners", default="0,1,2")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--raylets", action="store_true", help="rltrainer on a local cluster of one raylet per env runner"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=2_000_000)
    parser.add_argument("--target", type=float, default=475.0)
    args = parser.parse_args()
    if args.mode == "_one":
        kind, kwargs = args.rest[0], json.loads(args.rest[1])
        print(json.dumps(one_throughput(**kwargs) if kind == "throughput" else one_solve(**kwargs)))
        return
    if args.mode == "throughput":
        for runners in (int(n) for n in args.runners.split(",")):
            row = in_fresh_process(
                "throughput",
                lib=args.lib,
                algo=args.algo,
                runners=runners,
                seconds=args.seconds,
                raylets=args.raylets,
            )
            print(
                f"{row['lib']:9s} {row['algo']:6s} runners={runners}: "
                f"{row['sampled_per_s']:8.0f} env steps/s sampled, {row['trained_per_s']:8.0f} trained",
                flush=True,
            )
        return
    times = []
    for seed in range(args.seeds):
        row = in_fresh_process(
            "solve", lib=args.lib, algo=args.algo, seed=seed, budget=args.budget, target=args.target
        )
        times.append(row["seconds"] if row["solved"] else math.inf)
        print(json.dumps(row), flush=True)
    solved = sorted(times)
    print(
        f"{args.lib} {args.algo}: solved {sum(math.isfinite(t) for t in times)}/{args.seeds}, median "
        f"{solved[len(solved) // 2]:.1f} s"
    )


if __name__ == "__main__":
    main()
