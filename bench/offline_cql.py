"""CQL from recorded SAC data on Pendulum: record a trained SAC policy, train the tuned CQL
from the recording alone, and time it.

    python -m bench.offline_cql record --output /tmp/rltrainer-offline/pendulum-sac
    python -m bench.offline_cql                 # record into a temporary folder, then CQL

``record``: trains ``tuned_examples/sac_pendulum.yaml`` (seed 0) until its smoothed training
return (20 episodes) reaches -200 (or its 50,000-step budget), then has the trained policy act
(sampling, as it was trained) for ``--steps`` env steps (20,000) with
``.offline_data(output=...)``: Parquet files of whole-episode rows, SAC's actions in [-1, 1].

The benchmark: ``tuned_examples/cql_pendulum.yaml`` (``--config`` overrides it; ``--data`` reads
an existing recording instead of making one) for seeds 0..``--seeds``-1, each from build() on:
seconds and iterations until the greedy evaluation (10 episodes after every iteration) averages
-300 or more, within the example's iteration budget.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import TUNED_EXAMPLES, median, print_json_line

TARGET = -300.0
SAC_TARGET = -200.0


def record(output: Path, steps: int, storage: Path) -> dict[str, Any]:
    """Train the tuned SAC until it reaches -200, then record ``steps`` of its acting into ``output``."""
    import numpy as np

    from rltrainer.algorithms.sac import SAC, SACConfig

    spec = yaml.safe_load((TUNED_EXAMPLES / "sac_pendulum.yaml").read_text())["pendulum-sac"]
    config = SACConfig().update_from_dict({**spec["config"], "env": "Pendulum-v1", "seed": 0})
    started = time.perf_counter()
    algo = config.reporting(storage_path=str(storage)).build()
    while True:
        result = algo.train()
        budget = spec["stop"]["timesteps_total"]
        if result["episode_return_mean"] >= SAC_TARGET or result["timesteps_total"] >= budget:
            break
    checkpoint = algo.save()
    algo.stop()
    sac_seconds = time.perf_counter() - started
    # Ten envs, one episode (200 steps) per fragment: the same policy, recorded ten times faster.
    overrides = {"output": str(output), "storage_path": str(storage), "num_envs_per_env_runner": 10}
    recorder = SAC.from_checkpoint(checkpoint, {**overrides, "rollout_fragment_length": 200})
    _, episodes = recorder.env_runner_group.sample(steps)
    recorder.stop()
    recorded = float(np.mean([e.episode_return for e in episodes]))
    print(
        f"SAC reached {result['episode_return_mean']:.1f} after {result['timesteps_total']} steps "
        f"({sac_seconds:.1f} s); recorded {steps} steps of it into {output} (mean return {recorded:.1f})"
    )
    return {
        "sac_steps": result["timesteps_total"],
        "sac_return": result["episode_return_mean"],
        "sac_seconds": sac_seconds,
        "recorded_return": recorded,
    }


def train_cql(data: Path, seed: int, storage: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """Seconds (from build() on) and iterations until the tuned CQL's evaluation reaches -300."""
    from rltrainer.algorithms.cql import CQLConfig

    spec = yaml.safe_load((TUNED_EXAMPLES / "cql_pendulum.yaml").read_text())["pendulum-cql"]
    settings = {**spec["config"], "env": "Pendulum-v1", "input": str(data), "seed": seed, **overrides}
    started = time.perf_counter()
    algo = CQLConfig().update_from_dict(settings).reporting(storage_path=str(storage)).build()
    best = float("-inf")
    try:
        for _ in range(spec["stop"]["training_iteration"]):
            result = algo.train()
            best = max(best, result.get("evaluation", {}).get("episode_return_mean", float("-inf")))
            if best >= TARGET:
                break
        steps = algo.learner_group.local_learner.gradient_steps
    finally:
        algo.stop()
    seconds = time.perf_counter() - started
    iterations = result["training_iteration"]
    print(
        f"  CQL seed {seed}: {best:.1f} after {iterations} iterations ({steps} gradient steps), "
        f"{seconds:.1f} s"
    )
    return {"seconds": seconds, "iterations": iterations, "gradient_steps": steps, "solved": best >= TARGET}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["record", "bench"], default="bench")
    parser.add_argument("--output", type=Path, help="record: where the Parquet files go")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps of SAC acting to record")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", type=Path, help="bench: an existing recording (default: record one)")
    parser.add_argument("--config", default="{}", help="JSON overrides of the tuned CQL's config")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rltrainer_bench_cql_") as tmp:
        work = Path(tmp)
        if args.command == "record":
            record(args.output or Path("/tmp/rltrainer-offline/pendulum-sac"), args.steps, work)
            return
        figures: dict[str, Any] = {}
        data = args.data
        if data is None:
            data = work / "data"
            figures.update(record(data, args.steps, work))
        runs = [train_cql(data, seed, work, json.loads(args.config)) for seed in range(args.seeds)]
        figures.update(
            cql_seconds_median=median([r["seconds"] for r in runs]),
            cql_iterations_median=median([r["iterations"] for r in runs]),
            cql_seconds=[round(r["seconds"], 1) for r in runs],
            cql_gradient_steps=[r["gradient_steps"] for r in runs],
            cql_solved=sum(r["solved"] for r in runs),
            seeds=len(runs),
        )
        for key, value in figures.items():
            print(f"{key}: {value:.1f}" if isinstance(value, float) else f"{key}: {value}")
        print_json_line(figures)


if __name__ == "__main__":
    main()
