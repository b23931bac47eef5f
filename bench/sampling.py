"""Env-runner sampling throughput (policy inference included) against the stepping ceiling:
the same vector env stepped with random actions. BENCHMARKS.md, "Sampling throughput".

    python -m bench.sampling --envs 1,8,64
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

from bench.common import median, print_json_line
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import make_vector_env


def ceiling(env_id: str, num_envs: int, seconds: float) -> float:
    """Env steps/s of the vector env with random actions (no policy)."""
    envs = make_vector_env(env_id, EnvContext({}), num_envs)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            envs.step(envs.action_space.sample())
        steps += 100 * num_envs
    rate = steps / (time.perf_counter() - start)
    envs.close()
    return rate


def sampling(env_id: str, num_envs: int, seconds: float, hiddens: list[int]) -> float:
    """Env steps/s of ``EnvRunner.sample()`` with the default PPO policy (batched inference)."""
    with tempfile.TemporaryDirectory() as storage:
        config = (
            PPOConfig()
            .environment(env_id)
            .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=max(1, 2048 // num_envs))
            .training(model={"fcnet_hiddens": hiddens}, train_batch_size=2048)
            .reporting(storage_path=storage)
        )
        algo = config.build()
        runner = algo.env_runner_group.local_worker()
        runner.sample()  # warm up
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            runner.sample()
            steps += runner.config.get_rollout_fragment_length() * num_envs  # every env.step slot
        rate = steps / (time.perf_counter() - start)
        algo.stop()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", default="1,8,64", help="comma-separated vector sizes")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="medians over this many measurements")
    parser.add_argument("--hiddens", default="64,64", help="policy MLP hidden sizes")
    args = parser.parse_args()
    hiddens = [int(h) for h in args.hiddens.split(",")]
    print(f"{args.env}, policy MLP {hiddens}, medians of {args.repeats} x {args.seconds:.0f} s")
    print(f"{'envs':>6} {'sampling steps/s':>18} {'ceiling steps/s':>17} {'ratio':>7}")
    figures: dict[str, dict[str, float]] = {}
    for num_envs in (int(n) for n in args.envs.split(",")):
        ours = median([sampling(args.env, num_envs, args.seconds, hiddens) for _ in range(args.repeats)])
        top = median([ceiling(args.env, num_envs, args.seconds) for _ in range(args.repeats)])
        figures[str(num_envs)] = {
            "steps_per_s": round(ours),
            "ceiling_steps_per_s": round(top),
            "ratio": round(ours / top, 3),
        }
        print(f"{num_envs:>6} {ours:>18,.0f} {top:>17,.0f} {ours / top:>7.1%}")
    print_json_line({"env": args.env, "gym_version": gym.__version__, "sampling": figures})


if __name__ == "__main__":
    main()
