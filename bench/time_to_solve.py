"""Time to solve (BENCHMARKS.md): wall-clock from process start until the mean return of the
last 20 training episodes reaches the target, then a 20-episode deterministic evaluation
of the final policy must reach it too. Each seed runs in a fresh process.

    python -m bench.time_to_solve --algo PPO --env CartPole-v1 --seeds 5
    python -m bench.time_to_solve --algo DQN --env CartPole-v1 --seeds 5
    python -m bench.time_to_solve --algo SAC --env Pendulum-v1 --seeds 5

The config comes from the tuned example in ``tuned_examples/`` whose ``run`` and ``env`` match,
and so does the budget: its ``stop.timesteps_total`` (ES and ARS need 3M steps on CartPole,
PPO 300k); ``--budget`` overrides it. Training stops at the benchmark's target, or at the
tuned example's ``stop.episode_return_mean`` where that is stricter (a margin above the target
for the final greedy evaluation, which is still judged against the target; the seconds count
the extra training); ``--train-target`` overrides it. A tuned example that stops on its own
greedy evaluations (``stop: {evaluation/episode_return_mean: X}`` with an ``evaluation_interval``,
as RLlib's tuned examples) stops a seed only at an iteration whose evaluation reached X too;
``--eval-stop`` overrides X.

``--cpu-caps avx2`` runs every seed's process with torch's kernels (oneDNN, ATen, MKL),
numpy's (its own and OpenBLAS) and numba's capped at AVX2 (``bench.common.CAP_VALUES``): an
AVX-512 machine then computes as an AVX2-only one would, float results included. The
instruction sets a seed's process then uses are checked in a child process first and recorded
in the JSON line as ``kernels``, the variables set as ``cpu_caps``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.common import (
    CAP_VALUES,
    above_avx2,
    capped_env,
    find_tuned_example,
    kernels_in,
    run_seed,
    summarize_seeds,
)
from rltrainer.experiment import canonical_stop_key

#: BENCHMARKS.md's target per env, and the budget for a tuned example that sets none.
TARGETS = {"CartPole-v1": (475.0, 300_000), "Pendulum-v1": (-200.0, 50_000)}


def tuned_budget(spec: dict[str, Any], env: str) -> int | None:
    """The env-step budget a tuned example carries (``stop.timesteps_total``), else the env's default."""
    steps = (spec.get("stop") or {}).get("timesteps_total")
    return int(steps) if steps is not None else TARGETS.get(env, (None, None))[1]


def train_target(spec: dict[str, Any], target: float) -> float:
    """Where training stops: the tuned example's ``stop.episode_return_mean`` where it is
    stricter than the benchmark's ``target``, else the target itself."""
    stop = (spec.get("stop") or {}).get("episode_return_mean")
    return max(float(stop), target) if stop is not None else target


def evaluation_stop(spec: dict[str, Any]) -> float | None:
    """The tuned example's stop on its own greedy evaluations (``evaluation/episode_return_mean``,
    or RLlib's spellings of it), if it has one: a seed then also stops only at an iteration whose
    evaluation (every ``evaluation_interval`` iterations) reached it."""
    for key, value in (spec.get("stop") or {}).items():
        if canonical_stop_key(str(key)) == "evaluation/episode_return_mean":
            return float(value)
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", default="PPO")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--config", default="{}", help="JSON overrides of the tuned example's config")
    parser.add_argument("--target", type=float, help="default: BENCHMARKS.md's target for the env")
    parser.add_argument(
        "--train-target",
        type=float,
        help="the training mean that stops a seed; default: the tuned example's stop, if stricter",
    )
    parser.add_argument(
        "--eval-stop",
        type=float,
        help="stop a seed only at an iteration whose own greedy evaluation reached this too (needs an "
        "evaluation_interval); default: the tuned example's evaluation/episode_return_mean stop",
    )
    parser.add_argument(
        "--budget", type=int, help="env steps; default: the tuned example's stop.timesteps_total"
    )
    parser.add_argument(
        "--cpu-caps",
        choices=sorted(CAP_VALUES),
        help="cap torch's CPU kernels (oneDNN, ATen, MKL) at this instruction set in every seed's process",
    )
    args = parser.parse_args(argv)

    path, spec = find_tuned_example(args.algo, args.env)
    target = args.target if args.target is not None else TARGETS.get(args.env, (None, None))[0]
    budget = args.budget if args.budget is not None else tuned_budget(spec, args.env)
    if target is None or budget is None:
        raise SystemExit(f"no default target/budget for {args.env}: pass --target and --budget")
    train_at = args.train_target if args.train_target is not None else train_target(spec, target)
    config = {**spec.get("config", {}), **json.loads(args.config)}
    eval_stop = args.eval_stop if args.eval_stop is not None else evaluation_stop(spec)
    if eval_stop is not None and not config.get("evaluation_interval"):
        raise SystemExit(f"a stop on evaluations of {eval_stop} needs evaluation_interval in the config")
    child_env, caps = capped_env(args.cpu_caps)
    kernels = kernels_in(child_env)
    if caps and above_avx2(kernels):
        raise SystemExit(f"--cpu-caps {args.cpu_caps} did not take: the seeds would compute with {kernels}")
    capped = f", kernels capped at {args.cpu_caps}" if caps else ""
    evaluated = ""
    if eval_stop is not None:
        evaluated = f" and an evaluation of {eval_stop} (every {config['evaluation_interval']} iterations)"
    print(
        f"{args.algo} on {args.env}: target {target}, budget {budget} steps, config from {path.name}{capped}"
        + (f", training until a mean of {train_at}" if train_at != target else "")
        + evaluated
    )
    print(f"  kernels in the seeds' processes: {kernels}")

    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        command = [
            sys.executable,
            "-m",
            "bench.solve_one",
            "--algo",
            args.algo,
            "--env",
            args.env,
            "--config",
            json.dumps(config),
            "--seed",
            str(seed),
            "--target",
            str(target),
            "--train-target",
            str(train_at),
            "--budget",
            str(budget),
            *(["--eval-stop", str(eval_stop)] if eval_stop is not None else []),
        ]
        runs.append(run_seed(command, seed, env=child_env))
    labels = {"train_target": train_at} if train_at != target else {}
    if eval_stop is not None:
        labels["eval_stop"] = eval_stop
    summarize_seeds(
        runs, algo=args.algo, env=args.env, kernels=kernels, **labels, **({"cpu_caps": caps} if caps else {})
    )


if __name__ == "__main__":
    main()
