"""One seed of ``bench.time_to_solve``, in its own process (so imports count in its time).

Prints one JSON line: when the stop criterion was met (``time.time()``), the process's CPU
seconds by then (all threads; less sensitive than wall time to a shared machine's load), env
steps, whether training solved, and the final policy's deterministic evaluation return.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from rltrainer.algorithms.registry import get_algorithm_class

#: BENCHMARKS.md's stop criterion averages the last 20 completed training episodes.
WINDOW = 20


def met_target(result: dict, target: float) -> bool:
    """Whether the mean return of the last ``WINDOW`` completed training episodes reaches
    ``target``: fewer episodes than that (ES and ARS count only their unperturbed ones, a few
    per iteration) do not make a window yet, however well they scored."""
    return result["episodes_total"] >= WINDOW and result["episode_return_mean"] >= target


def met_evaluation(result: dict, eval_stop: float | None) -> bool:
    """Whether this iteration's greedy evaluation (the tuned example's ``evaluation_interval``)
    reached ``eval_stop``; ``None``: the tuned example stops on the training mean alone."""
    if eval_stop is None:
        return True
    evaluation = (result.get("evaluation") or {}).get("episode_return_mean")
    return evaluation is not None and evaluation >= eval_stop


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--config", required=True, help="flat JSON config")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--target", type=float, required=True, help="the final evaluation's")
    parser.add_argument(
        "--train-target", type=float, help="the training mean that stops the run; default: --target"
    )
    parser.add_argument(
        "--eval-stop",
        type=float,
        help="stop only at an iteration whose own evaluation (evaluation_interval) reached this too",
    )
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as storage:
        config = get_algorithm_class(args.algo).config_class().environment(args.env)
        config.update_from_dict(json.loads(args.config))
        config.reporting(metrics_num_episodes_for_smoothing=WINDOW, storage_path=storage)
        config.debugging(seed=args.seed)
        config.evaluation(
            evaluation_duration=args.eval_episodes,
            evaluation_duration_unit="episodes",
            evaluation_config={"explore": False},
        )
        train_target = args.target if args.train_target is None else args.train_target
        algo = config.build()
        while True:
            result = algo.train()
            solved = met_target(result, train_target) and met_evaluation(result, args.eval_stop)
            if solved or result["timesteps_total"] >= args.budget:
                break
        stopped_at, cpu_s = time.time(), time.process_time()
        evaluation = algo.evaluate()["evaluation"]["episode_return_mean"]
        algo.stop()
    print(
        json.dumps(
            {
                "stopped_at": stopped_at,
                "cpu_s": cpu_s,
                "steps": result["timesteps_total"],
                "train_return": result["episode_return_mean"],
                "eval_return": evaluation,
                "solved": bool(solved and evaluation >= args.target),
            }
        )
    )


if __name__ == "__main__":
    main()
