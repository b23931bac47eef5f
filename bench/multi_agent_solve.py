"""Time to solve the two-CartPole multi-agent example (``tuned_examples/ppo_multi_cartpole.yaml``).

BENCHMARKS.md's protocol with one criterion per policy: each seed runs in a fresh process,
timed from that process's start until EVERY policy's mean return over the last 20 episodes
(``policy_reward_mean``, smoothing 20) reaches 475, within 300k env steps. Then the final
policies act greedily for 20 episodes of the multi-agent env, and each policy's mean return
is reported (not required: the single-agent protocol's deterministic check is reported, not
enforced, here). Prints one line per seed, the medians, then one JSON object as the last line.

    python -m bench.multi_agent_solve --seeds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

START = time.perf_counter()
EXAMPLE = Path(__file__).resolve().parents[1] / "tuned_examples" / "ppo_multi_cartpole.yaml"
TARGET, BUDGET, EVAL_EPISODES = 475.0, 300_000, 20


def solve_one(seed: int) -> dict:
    """One seed in this process (a fresh one: ``main`` starts a process per seed)."""
    import tempfile

    import yaml

    from rltrainer.algorithms.ppo import PPOConfig

    (experiment,) = yaml.safe_load(EXAMPLE.read_text()).values()
    settings = {**experiment["config"], "env": experiment["env"], "seed": seed}
    with tempfile.TemporaryDirectory() as tmp:
        algo = PPOConfig.from_dict({**settings, "storage_path": tmp}).build()
        try:
            while True:
                result = algo.train()
                returns = result["policy_reward_mean"]
                solved = len(returns) == 2 and min(returns.values()) >= TARGET
                if solved or result["timesteps_total"] >= BUDGET:
                    break
            seconds = time.perf_counter() - START
            runner = algo.workers.local_worker()
            episodes, _ = runner.sample_episodes(num_episodes=EVAL_EPISODES, explore=False)
        finally:
            algo.stop()
    greedy: dict[str, list[float]] = {}
    for episode in episodes:
        for pid, value in episode.policy_returns:
            greedy.setdefault(pid, []).append(value)
    return {
        "seed": seed,
        "solved": solved,
        "seconds": round(seconds, 2),
        "env_steps": result["timesteps_total"],
        "train": {pid: round(v, 1) for pid, v in sorted(returns.items())},
        "greedy": {pid: round(statistics.mean(v), 1) for pid, v in sorted(greedy.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a seed, in this process
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(solve_one(args.one)))
        return
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        done = subprocess.run(
            [sys.executable, "-m", "bench.multi_agent_solve", "--one", str(seed)],
            capture_output=True,
            text=True,
            check=True,
        )
        run = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append(run)
        print(
            f"seed {seed}: {'solved' if run['solved'] else 'NOT solved'} in {run['seconds']} s, "
            f"{run['env_steps']} env steps (train {run['train']}, greedy {run['greedy']})",
            flush=True,
        )
    solved = [run for run in runs if run["solved"]]
    summary = {
        "bench": "multi_agent_solve",
        "seeds": len(runs),
        "solved": len(solved),
        "median_s": statistics.median(run["seconds"] for run in runs),
        "median_env_steps": statistics.median(run["env_steps"] for run in runs),
        "runs": runs,
    }
    print(
        f"median {summary['median_s']} s, {summary['median_env_steps']} env steps, "
        f"{len(solved)}/{len(runs)} seeds solved"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
