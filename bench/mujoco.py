"""SAC on a MuJoCo env (HalfCheetah-v5): the return after a fixed number of env steps and the
gradient steps per second, rltrainer against Stable-Baselines3 with the same settings.

    python -m bench.mujoco                                  # rltrainer, 50k env steps, seed 0
    $ANCHORS_VENV/bin/python -m bench.mujoco --lib sb3      # + mujoco>=4,<5 (bench/anchors.py)
    python -m bench.mujoco --steps 20000 --threads 2

Settings: rl-baselines3-zoo's ``hyperparams/sac.yml`` for HalfCheetah (learning starts at 10k
env steps; SB3's SAC defaults otherwise): [256, 256] ReLU actor and critics, lr 3e-4 for all
three optimizers, batch 256, tau 0.005, gamma 0.99, one gradient step per env step, automatic
entropy with target -|A|, a 1M uniform replay buffer, one env. Figures: ``train_return`` (the
mean of the last 5 training episodes, 1,000 steps each), ``eval_return`` (5 deterministic
episodes on seeds 100-104, the same loop for both libraries), ``grad_steps_per_s`` (gradient
steps over the wall time from learning's start to the end) and the total wall time. torch
threads: ``--threads`` for both (default 1: on 2 cores more threads slow these small nets).
Prints a line, then one JSON line.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import print_json_line

LEARNING_STARTS = 10_000


def evaluate(env_id: str, act: Any, episodes: int = 5) -> float:
    """Mean return of ``episodes`` deterministic episodes (seeds 100, 101, ...)."""
    import gymnasium as gym

    env, returns = gym.make(env_id), []
    for i in range(episodes):
        obs, _ = env.reset(seed=100 + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return sum(returns) / len(returns)


def rltrainer_run(env_id: str, steps: int, seed: int, threads: int) -> dict[str, Any]:
    from rltrainer.algorithms.sac import SACConfig

    hiddens = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
    config = (
        SACConfig()
        .environment(env_id)
        .env_runners(num_envs_per_env_runner=1, rollout_fragment_length=1)
        .training(
            train_batch_size=256,
            gamma=0.99,
            tau=0.005,
            num_steps_sampled_before_learning_starts=LEARNING_STARTS,
            replay_buffer_config={"type": "ReplayBuffer", "capacity": 1_000_000},
            optimization_config={
                "actor_learning_rate": 3e-4,
                "critic_learning_rate": 3e-4,
                "entropy_learning_rate": 3e-4,
            },
            q_model_config=hiddens,
            policy_model_config=hiddens,
        )
        .reporting(metrics_num_episodes_for_smoothing=5, min_sample_timesteps_per_iteration=1000)
        .resources(num_cpus_for_main_process=threads)  # the driver's torch threads
        .debugging(seed=seed, log_level="ERROR")
    )
    started = time.perf_counter()
    algo = config.build()
    learning_started = None
    try:
        while True:
            result = algo.train()
            if learning_started is None and result["num_env_steps_sampled_lifetime"] >= LEARNING_STARTS:
                learning_started = time.perf_counter()
            if result["num_env_steps_sampled_lifetime"] >= steps:
                break
        ended = time.perf_counter()
        eval_return = evaluate(env_id, lambda obs: algo.compute_single_action(obs, explore=False))
        grad_steps = result["num_env_steps_trained_lifetime"] // 256  # one batch of 256 per step
    finally:
        algo.stop()
    return {
        "train_return": result["episode_return_mean"],
        "eval_return": eval_return,
        "grad_steps_per_s": grad_steps / (ended - learning_started),
        "seconds": ended - started,
        "env_steps": result["num_env_steps_sampled_lifetime"],
    }


def sb3_run(env_id: str, steps: int, seed: int, threads: int) -> dict[str, Any]:  # noqa: ARG001 - set in main
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    marks: dict[str, float] = {}

    class LearningStart(BaseCallback):
        def _on_step(self) -> bool:
            if "learning" not in marks and self.num_timesteps >= LEARNING_STARTS:
                marks["learning"] = time.perf_counter()
            return True

    started = time.perf_counter()
    model = SAC(
        "MlpPolicy", gym.make(env_id), learning_starts=LEARNING_STARTS, seed=seed, verbose=0,
        policy_kwargs={"net_arch": [256, 256]},
    )  # fmt: skip
    model.learn(total_timesteps=steps, callback=LearningStart())
    ended = time.perf_counter()
    episodes = [info["r"] for info in list(model.ep_info_buffer)[-5:]]
    eval_return = evaluate(env_id, lambda obs: model.predict(obs, deterministic=True)[0])
    return {
        "train_return": sum(episodes) / len(episodes),
        "eval_return": eval_return,
        "grad_steps_per_s": model._n_updates / (ended - marks["learning"]),
        "seconds": ended - started,
        "env_steps": model.num_timesteps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--lib", choices=["rltrainer", "sb3"], default="rltrainer")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both libraries)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    run = (sb3_run if args.lib == "sb3" else rltrainer_run)(args.env, args.steps, args.seed, args.threads)
    print(
        f"{args.lib} SAC {args.env}, {run['env_steps']:,} env steps: train return {run['train_return']:.0f}, "
        f"eval return {run['eval_return']:.0f}, {run['grad_steps_per_s']:.0f} gradient steps/s, "
        f"{run['seconds']:.0f} s"
    )
    print_json_line({"env": args.env, "lib": args.lib, "seed": args.seed, "threads": args.threads, **run})


if __name__ == "__main__":
    main()
