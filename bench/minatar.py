"""PPO from pixels that learns within minutes on a CPU: time to a return on MinAtar Breakout,
rltrainer against Stable-Baselines3 with the same settings and network, each seed in a fresh
process (imports and start-up count).

    python -m bench.minatar --seeds 3
    $ANCHORS_VENV/bin/python -m bench.minatar --lib sb3 --seeds 3   # + minatar==1.0.15

MinAtar (Young & Tian 2019, ``minatar`` on PyPI) plays Atari-like games on a 10x10 grid of
boolean channels; ``MinAtar/Breakout-v1`` is Breakout with its 3 useful actions and MinAtar's
defaults (sticky actions with probability 0.1, difficulty ramping). A random policy scores
~0.4 per episode.

Protocol: time from the seed's process start until the mean return of the last 20 completed
training episodes reaches ``--target`` (5.0), within ``--budget`` env steps (1M); then the
final policy plays 10 episodes greedily (capped at 5,000 steps each, since a perfect Breakout
player never loses the ball). Settings, identical for both: the MinAtar paper's network (one
conv layer of 16 3x3 filters at stride 1, "valid", then a 128-unit layer, ReLU, policy and
value heads on the shared features), 8 envs x 128 steps per iteration, 4 epochs of 256-step
minibatches, lr 5e-4, clip 0.2, GAE lambda 0.95, gamma 0.99, vf coeff 0.5, entropy 0.01, no
KL penalty, ``--threads`` torch threads (2: one per core).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

from bench.common import run_seed, summarize_seeds

ENV = "MinAtar/Breakout-v1"
SETTINGS = {
    "num_envs": 8,
    "rollout": 128,
    "epochs": 4,
    "minibatch": 256,
    "lr": 5e-4,
    "clip": 0.2,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "vf_coeff": 0.5,
    "entropy": 0.01,
}
WINDOW = 20
EVAL_EPISODES = 10
EVAL_MAX_STEPS = 5_000


def greedy_return(act: Any, seed: int) -> float:
    """Mean return of ``EVAL_EPISODES`` greedy episodes of ``act(obs) -> action``."""
    import gymnasium as gym
    from minatar.gym import register_envs

    register_envs()
    env = gym.make(ENV, max_episode_steps=EVAL_MAX_STEPS)
    total = 0.0
    for episode in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + seed * 100 + episode)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
    return total / EVAL_EPISODES


def rltrainer_one_seed(args: argparse.Namespace) -> dict[str, Any]:
    from rltrainer.algorithms.ppo import PPOConfig

    s = SETTINGS
    algo = (
        PPOConfig()
        .environment(ENV)
        .env_runners(
            num_env_runners=0, num_envs_per_env_runner=s["num_envs"], rollout_fragment_length=s["rollout"]
        )
        .training(
            train_batch_size=s["num_envs"] * s["rollout"],
            minibatch_size=s["minibatch"],
            num_epochs=s["epochs"],
            lr=s["lr"],
            clip_param=s["clip"],
            lambda_=s["gae_lambda"],
            gamma=s["gamma"],
            vf_loss_coeff=s["vf_coeff"],
            entropy_coeff=s["entropy"],
            kl_coeff=0.0,
            model={"conv_filters": [[16, [3, 3], 1]], "post_fcnet_hiddens": [128], "vf_share_layers": True},
        )
        .resources(num_cpus_for_main_process=args.threads)
        .reporting(metrics_num_episodes_for_smoothing=WINDOW)
        .debugging(seed=args.seed, log_level="ERROR")
        .build()
    )
    try:
        while True:
            result = algo.train()
            steps = result["num_env_steps_sampled_lifetime"]
            solved = result["episodes_total"] >= WINDOW and result["episode_return_mean"] >= args.target
            if solved or steps >= args.budget:
                stopped_at = time.time()
                break
        train_return = result["episode_return_mean"]
        eval_return = greedy_return(lambda obs: algo.compute_single_action(obs, explore=False), args.seed)
    finally:
        algo.stop()
    return {"stopped_at": stopped_at, "steps": steps, "solved": solved, "train_return": train_return,
            "eval_return": eval_return}  # fmt: skip


def sb3_one_seed(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from minatar.gym import register_envs
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    torch.set_num_threads(args.threads)
    register_envs()

    class MinAtarCNN(BaseFeaturesExtractor):
        """The MinAtar paper's network (as ``conv_filters=[[16, [3, 3], 1]]`` + a 128 layer)."""

        def __init__(self, observation_space: Any, features_dim: int = 128) -> None:
            super().__init__(observation_space, features_dim)
            height, width, channels = observation_space.shape
            self.net = nn.Sequential(
                nn.Conv2d(channels, 16, 3, 1), nn.ReLU(), nn.Flatten(),
                nn.Linear(16 * (height - 2) * (width - 2), features_dim), nn.ReLU(),
            )  # fmt: skip

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs.permute(0, 3, 1, 2))

    state: dict[str, Any] = {"solved": False}

    class StopAtTarget(BaseCallback):
        def _on_step(self) -> bool:
            episodes = [info["r"] for info in self.model.ep_info_buffer]
            if len(episodes) >= WINDOW and sum(episodes[-WINDOW:]) / WINDOW >= args.target:
                state.update(solved=True, stopped_at=time.time(), steps=self.num_timesteps)
                return False
            return True

    s = SETTINGS
    model = PPO(
        "MlpPolicy",
        make_vec_env(ENV, n_envs=s["num_envs"], seed=args.seed),
        n_steps=s["rollout"], batch_size=s["minibatch"], n_epochs=s["epochs"], learning_rate=s["lr"],
        clip_range=s["clip"], gae_lambda=s["gae_lambda"], gamma=s["gamma"], vf_coef=s["vf_coeff"],
        ent_coef=s["entropy"], seed=args.seed, device="cpu", verbose=0,
        policy_kwargs={"features_extractor_class": MinAtarCNN, "net_arch": []},
    )  # fmt: skip
    model.learn(total_timesteps=args.budget, callback=StopAtTarget())
    if not state["solved"]:
        state.update(stopped_at=time.time(), steps=model.num_timesteps)
    episodes = [info["r"] for info in model.ep_info_buffer][-WINDOW:]
    state["train_return"] = sum(episodes) / len(episodes) if episodes else math.nan
    state["eval_return"] = greedy_return(
        lambda obs: int(model.predict(obs, deterministic=True)[0]), args.seed
    )
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=["rltrainer", "sb3"], default="rltrainer")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--target", type=float, default=5.0)
    parser.add_argument("--budget", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (both libraries)")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # one seed, in this process
    args = parser.parse_args()
    if args.seed is not None:
        one_seed = rltrainer_one_seed if args.lib == "rltrainer" else sb3_one_seed
        print(json.dumps(one_seed(args)))
        return
    print(f"{args.lib} PPO {ENV}: time to a training return of {args.target} (budget {args.budget:,} steps)")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    runs = []
    for seed in range(args.seeds):
        options = {"--lib": args.lib, "--seed": seed, "--target": args.target, "--budget": args.budget,
                   "--threads": args.threads}  # fmt: skip
        command = [sys.executable, "-m", "bench.minatar", *(str(x) for pair in options.items() for x in pair)]
        runs.append(run_seed(command, seed, env))
    summarize_seeds(runs, env=ENV, lib=args.lib, target=args.target, threads=args.threads)


if __name__ == "__main__":
    main()
