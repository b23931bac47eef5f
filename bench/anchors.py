"""Anchors for BENCHMARKS.md's "time to solve": Stable-Baselines3 and RLlib under our protocol.

Times other libraries on this machine so the README can quote their figures beside ours
(``bench.time_to_solve``), with the same protocol: each seed runs in a fresh process; time is
wall-clock from that process's start (imports and start-up included) until the mean return of
the last 20 completed TRAINING episodes reaches the target; then the final policy is evaluated
for 20 episodes deterministically and must reach the target too. A seed that does not get there
within the env-step budget counts as failed. Prints median seconds, median env steps and
solved/seeds, then, as its last line, one JSON object with the figures.

    python -m bench.anchors --lib sb3 --algo DQN --env CartPole-v1 --seeds 5
    python -m bench.anchors --lib sb3 --algo SAC --env Pendulum-v1 --seeds 5
    python -m bench.anchors --lib sb3 --algo TD3 --env Pendulum-v1 --seeds 3
    python -m bench.anchors --lib rllib --algo SAC --env Pendulum-v1 --seeds 5
    python -m bench.anchors --lib sb3 --algo RecurrentPPO --env CartPoleNoVel-v1 --seeds 5  # + sb3-contrib

Targets and budgets (BENCHMARKS.md): CartPole-v1 475 within 300k env steps; Pendulum-v1 -200
within 50k env steps. ``--target``, ``--budget``, ``--window`` (20) and ``--eval-episodes`` (20)
change the protocol: for smoke tests only.

Threads: by default each library keeps its own torch thread count (SB3 and RLlib's driver: one
per core); rltrainer pins its main process to 1 (``num_cpus_for_main_process``). ``--threads 1``
sets OMP_NUM_THREADS/``torch.set_num_threads`` per seed for a like-for-like figure. On 2 cores
with anything else running, 2 torch threads can be ~10x slower for these small nets (measured:
SAC-sized update 29 ms vs 2.8 ms), so time on a quiet machine and say which setting you used.

It runs in its own virtualenv, never the project's (it must not import rltrainer)::

    python3.11 -m venv /tmp/anchors-venv
    /tmp/anchors-venv/bin/pip install torch==2.13.0          # first: the CPU build here
    /tmp/anchors-venv/bin/pip install stable-baselines3==2.9.2 "ray[rllib]==2.60.0"
    cd /work/main && /tmp/anchors-venv/bin/python -m bench.anchors --lib sb3 --algo DQN ...

(``ray[rllib]==2.60.0`` pins gymnasium 1.2.2, which SB3 2.9.2 accepts.)

Hyperparameters' sources:

- SB3: rl-baselines3-zoo's tuned ``hyperparams/dqn.yml`` (CartPole-v1), ``hyperparams/sac.yml``
  and ``hyperparams/td3.yml`` (Pendulum-v1), as listed in BENCHMARKS.md (TD3's from the zoo's
  file); SB3 2.9.2 defaults for everything else. The zoo
  trains DQN for n_timesteps=5e4 and its epsilon schedule (1.0 -> 0.04 over 16 % of training)
  is relative to that, so here epsilon reaches 0.04 at 0.16 * 5e4 = 8,000 env steps and stays
  there while training goes on up to the budget. SB3's ``target_update_interval`` counts env
  steps (SB3's meaning, as in the zoo).
- RLlib: Ray's own tuned example ``rllib/tuned_examples/sac/pendulum_sac.py`` (ray-project/ray,
  new API stack, stored at commit 00501e2bd10f17c70dc12cdf54a203cf2db02a09), with its script's
  defaults (--num-learners unset, so the learning rates' sqrt(num_learners) factor is 1; no
  --num-env-runners, so RLlib's default of sampling on the local EnvRunner).
  ``metrics_num_episodes_for_smoothing`` is 20 (the example uses 5) so RLlib's smoothed
  ``episode_return_mean`` is our last-20-episode criterion; we also require 20 completed
  episodes. Ray starts a fresh local instance with ``include_dashboard=False`` (the dashboard
  does no training).
  The deterministic evaluation samples 20 episodes with ``explore=False`` on the local EnvRunner.
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

TARGETS = {
    "CartPole-v1": (475.0, 300_000),
    "Pendulum-v1": (-200.0, 50_000),
    # CartPole without its velocities (rl-zoo's MaskVelocityWrapper; rltrainer's StatelessCartPole):
    # README's "An LSTM on a memory task".
    "CartPoleNoVel-v1": (200.0, 250_000),
}

# rl-baselines3-zoo, hyperparams/dqn.yml and hyperparams/sac.yml (policy MlpPolicy, 1 env).
SB3_ZOO: dict[tuple[str, str], dict[str, Any]] = {
    ("DQN", "CartPole-v1"): {
        "learning_rate": 2.3e-3,
        "batch_size": 64,
        "buffer_size": 100_000,
        "learning_starts": 1000,
        "gamma": 0.99,
        "target_update_interval": 10,
        "train_freq": 256,
        "gradient_steps": 128,
        "exploration_fraction": 0.16,
        "exploration_final_eps": 0.04,
        "policy_kwargs": {"net_arch": [256, 256]},
    },
    ("SAC", "Pendulum-v1"): {
        "learning_rate": 1e-3,
        "buffer_size": 1_000_000,
        "learning_starts": 100,
        "batch_size": 256,
        "tau": 0.005,
        "gamma": 0.99,
        "train_freq": 1,
        "gradient_steps": 1,
        "ent_coef": "auto",
    },
    # hyperparams/td3.yml (net_arch [400, 300]; noise_type normal with noise_std 0.1, built
    # here as the zoo does: NormalActionNoise over the action dimensions).
    ("TD3", "Pendulum-v1"): {
        "learning_rate": 1e-3,
        "buffer_size": 200_000,
        "learning_starts": 10_000,
        "gamma": 0.98,
        "train_freq": 1,
        "gradient_steps": 1,
        "noise_std": 0.1,
        "policy_kwargs": {"net_arch": [400, 300]},
    },
    # hyperparams/ppo_lstm.yml (sb3-contrib's RecurrentPPO, MlpLstmPolicy's defaults: an LSTM of
    # 256 for the actor and one for the critic, [64, 64] tanh layers); lin_ schedules over the
    # zoo's 1e5 steps (SB3_ZOO_TIMESTEPS).
    ("RECURRENTPPO", "CartPoleNoVel-v1"): {
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": 1e-3,
        "clip_range": 0.2,
    },
}
# The zoo's n_timesteps: the horizon of its schedules (epsilon for DQN, lin_ for RecurrentPPO),
# whatever budget learn() is given.
SB3_ZOO_TIMESTEPS = {"DQN": 50_000, "RECURRENTPPO": 100_000}
SB3_ZOO_ENVS = {"RECURRENTPPO": 8}  # n_envs

RLLIB_TUNED = {("SAC", "Pendulum-v1")}


def last_window_mean(returns: list[float], window: int) -> float:
    """Mean of the last ``window`` returns (nan before any episode)."""
    last = returns[-window:]
    return sum(last) / len(last) if last else math.nan


def make_env(env_id: str) -> Any:
    """``gym.make``, with ``CartPoleNoVel-v1`` as rl-zoo builds it: CartPole-v1 with the cart's
    and the pole's velocities (observation indices 1 and 3) multiplied by zero."""
    import gymnasium as gym
    import numpy as np

    if env_id != "CartPoleNoVel-v1":
        return gym.make(env_id)
    mask = np.array([1.0, 0.0, 1.0, 0.0], dtype=np.float32)
    return gym.wrappers.TransformObservation(gym.make("CartPole-v1"), lambda obs: obs * mask, None)


def _linear(initial: float, timesteps: Any, horizon: int) -> Any:
    """rl-zoo's ``lin_<initial>``: ``initial`` falling linearly to 0 over ``horizon`` env steps."""
    return lambda _progress_remaining: initial * max(0.0, 1.0 - timesteps() / horizon)


def sb3_one_seed(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    target, window = args.target, args.window

    class StopAtTarget(BaseCallback):
        """Collects Monitor's episode returns; stops once the last ``window`` average the target."""

        def __init__(self) -> None:
            super().__init__()
            self.returns: list[float] = []
            self.solved = False

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            self.solved = len(self.returns) >= window and last_window_mean(self.returns, window) >= target
            return not self.solved

    hyperparams = dict(SB3_ZOO[args.algo, args.env])
    if args.algo == "RECURRENTPPO":
        from sb3_contrib import RecurrentPPO
        from stable_baselines3.common.env_util import make_vec_env

        env = make_vec_env(lambda: make_env(args.env), n_envs=SB3_ZOO_ENVS[args.algo], seed=args.seed)
        horizon, built = SB3_ZOO_TIMESTEPS[args.algo], []
        steps = lambda: built[0].num_timesteps if built else 0  # noqa: E731 - schedules run in the constructor
        for key in ("learning_rate", "clip_range"):  # the zoo's lin_ schedules, over its horizon
            hyperparams[key] = _linear(hyperparams[key], steps, horizon)
        model = RecurrentPPO("MlpLstmPolicy", env, seed=args.seed, device="cpu", verbose=0, **hyperparams)
        built.append(model)
    else:
        algo_class = {"DQN": DQN, "SAC": SAC, "TD3": TD3}[args.algo]
        env = Monitor(make_env(args.env))
        if "noise_std" in hyperparams:
            from stable_baselines3.common.noise import NormalActionNoise

            size = env.action_space.shape[0]
            noise = hyperparams.pop("noise_std") * np.ones(size)
            hyperparams["action_noise"] = NormalActionNoise(mean=np.zeros(size), sigma=noise)
        model = algo_class("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0, **hyperparams)
    if args.algo == "DQN":
        # Epsilon follows the zoo's schedule over its 5e4 steps, whatever the budget passed to learn().
        zoo_schedule = model.exploration_schedule
        model.exploration_schedule = lambda _progress_remaining: zoo_schedule(
            1.0 - model.num_timesteps / SB3_ZOO_TIMESTEPS["DQN"]
        )
    callback = StopAtTarget()
    model.learn(total_timesteps=args.budget, callback=callback)
    stopped_at = time.time()

    eval_env = Monitor(make_env(args.env))
    eval_env.reset(seed=args.seed + 10_000)
    evaluation, _ = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
    return {
        "stopped_at": stopped_at,
        "steps": int(model.num_timesteps),
        "episodes": len(callback.returns),
        "train_return": last_window_mean(callback.returns, window),
        "eval_return": float(evaluation),
        "solved": bool(callback.solved and evaluation >= target),
    }


def rllib_one_seed(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        EPISODE_RETURN_MEAN,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_EPISODES_LIFETIME,
    )
    from torch import nn

    ray.init(address="local", include_dashboard=False)  # a fresh local instance, never a running one
    # rllib/tuned_examples/sac/pendulum_sac.py (num_learners unset -> the sqrt factors are 1).
    config = (
        SACConfig()
        .environment(args.env)
        .training(
            initial_alpha=1.001,
            actor_lr=2e-4,
            critic_lr=8e-4,
            alpha_lr=9e-4,
            lr=None,
            target_entropy="auto",
            n_step=(2, 5),
            tau=0.005,
            train_batch_size_per_learner=256,
            target_network_update_freq=1,
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 100000,
                "alpha": 1.0,
                "beta": 0.0,
            },
            num_steps_sampled_before_learning_starts=256,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256, 256],
                fcnet_activation="relu",
                fcnet_kernel_initializer=nn.init.xavier_uniform_,
                head_fcnet_hiddens=[],
                head_fcnet_activation=None,
                head_fcnet_kernel_initializer="orthogonal_",
                head_fcnet_kernel_initializer_kwargs={"gain": 0.01},
            ),
        )
        .reporting(metrics_num_episodes_for_smoothing=args.window)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    while True:
        runners = algo.train()[ENV_RUNNER_RESULTS]
        steps = int(runners.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
        train_return = float(runners.get(EPISODE_RETURN_MEAN, math.nan))
        episodes = int(runners.get(NUM_EPISODES_LIFETIME, 0))
        solved = episodes >= args.window and train_return >= args.target
        if solved or steps >= args.budget:
            break
    stopped_at = time.time()

    if algo.env_runner is None:
        raise SystemExit("no local EnvRunner to evaluate on")
    done = [e for e in algo.env_runner.sample(num_episodes=args.eval_episodes, explore=False) if e.is_done]
    evaluation = sum(e.get_return() for e in done) / len(done)
    algo.stop()
    ray.shutdown()
    return {
        "stopped_at": stopped_at,
        "steps": steps,
        "episodes": episodes,
        "train_return": train_return,
        "eval_return": float(evaluation),
        "eval_episodes": len(done),
        "solved": bool(solved and evaluation >= args.target),
    }


def run_seeds(args: argparse.Namespace) -> None:
    print(
        f"{args.lib} {args.algo} on {args.env}: target {args.target}, budget {args.budget} steps, "
        f"{args.seeds} seeds"
    )
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        command = [sys.executable, "-m", "bench.anchors", "--one-seed", str(seed)]
        command += ["--lib", args.lib, "--algo", args.algo, "--env", args.env]
        command += ["--target", str(args.target), "--budget", str(args.budget)]
        command += ["--window", str(args.window), "--eval-episodes", str(args.eval_episodes)]
        env = dict(os.environ)
        if args.threads:
            command += ["--threads", str(args.threads)]
            env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        runs.append(run_seed(command, seed, env=env))
    summarize_seeds(
        runs,
        lib=args.lib,
        algo=args.algo,
        env=args.env,
        target=args.target,
        budget=args.budget,
        window=args.window,
        eval_episodes=args.eval_episodes,
        threads=args.threads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lib", required=True, choices=["sb3", "rllib"])
    parser.add_argument("--algo", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--target", type=float, help="default: BENCHMARKS.md's target for the env")
    parser.add_argument("--budget", type=int, help="env steps; default: BENCHMARKS.md's budget")
    parser.add_argument("--window", type=int, default=20, help="training episodes in the stop criterion")
    parser.add_argument("--eval-episodes", type=int, default=20, help="deterministic evaluation episodes")
    parser.add_argument(
        "--threads", type=int, help="torch threads per seed (OMP_NUM_THREADS); default: the library's own"
    )
    parser.add_argument("--one-seed", type=int, metavar="SEED", help="internal: run this one seed here")
    args = parser.parse_args()

    args.algo = args.algo.upper()
    tuned = SB3_ZOO if args.lib == "sb3" else RLLIB_TUNED
    if (args.algo, args.env) not in tuned:
        raise SystemExit(f"no tuned {args.lib} settings for {args.algo} on {args.env}: have {sorted(tuned)}")
    default_target, default_budget = TARGETS[args.env]
    args.target = args.target if args.target is not None else default_target
    args.budget = args.budget if args.budget is not None else default_budget

    if args.one_seed is None:
        run_seeds(args)
        return
    args.seed = args.one_seed
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = sb3_one_seed(args) if args.lib == "sb3" else rllib_one_seed(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
