"""PPO on an Atari game from pixels: env frames per second end to end while training (sampling
with the conv policy, learning, weight sync), with rl-baselines3-zoo's Atari PPO settings;
``--lib sb3`` runs Stable-Baselines3's PPO with the same settings (from the anchors' virtualenv,
bench/anchors.py's docstring, plus ``ale-py==0.12.1 opencv-python-headless pyyaml``).

    python -m bench.atari
    python -m bench.atari --env BreakoutNoFrameskip-v4 --iterations 10 --env-runners 0,2
    python -m bench.atari --nature          # SB3's network size (NatureCNN and a 512 layer)
    python -m bench.atari --num-gpus 1 --gpus-per-env-runner 1   # learner and inference on a GPU
    python -m bench.atari --algo APPO --env-runners 2             # asynchronous: 2 s iterations
    $ANCHORS_VENV/bin/python -m bench.atari --lib sb3

Settings (the zoo's ``hyperparams/ppo.yml`` for Atari): 8 envs, 128 steps each per iteration
(a 1,024-step train batch), 4 epochs of 256-step minibatches, lr 2.5e-4, clip 0.1, vf coeff
0.5, entropy 0.01, shared conv trunk (RLlib's 84x84 filters here, the Nature CNN there),
rewards clipped to their sign. Both use DeepMind's preprocessing (rltrainer: ALE's batched env;
SB3: ``make_atari_env`` and ``VecFrameStack``) on the ``NoFrameskip-v4`` id, whose frame skip of
4 both apply. Frames are env steps times 4. The first iteration (start-up, torch's first conv
calls) is left out; the figure is the median over the others. Prints a table and, last, one
JSON line.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import median, print_json_line

FRAME_SKIP = 4
BATCH = 1024  # env steps per iteration: 8 envs x 128


#: SB3's NatureCNN layers (Mnih et al. 2015) in RLlib's terms (here "same" padding but on the last).
NATURE = {"conv_filters": [[32, [8, 8], 4], [64, [4, 4], 2], [64, [3, 3], 1]], "post_fcnet_hiddens": [512]}


def config(
    env: str,
    env_runners: int,
    main_cpus: int,
    nature: bool = False,
    gpus: float = 0,
    runner_gpus: float = 0,
    algo: str = "PPO",
    torch_compile: str = "",
) -> Any:
    from rltrainer.algorithms.registry import get_config_class

    compiled = {  # --torch-compile learner,worker: the framework() settings
        "torch_compile_learner": "learner" in torch_compile,
        "torch_compile_learner_what_to_compile": "complete_update",
        "torch_compile_worker": "worker" in torch_compile,
    }

    envs_per_runner = 8 // max(env_runners, 1)
    if algo == "APPO":  # the same batches, one pass over each; iterations of 2 s (it never waits)
        return (
            get_config_class("APPO")()
            .environment(env, clip_rewards=True)
            .env_runners(
                num_env_runners=env_runners,
                num_envs_per_env_runner=envs_per_runner,
                rollout_fragment_length=128,
            )
            .training(
                train_batch_size=1024,
                lr=2.5e-4,
                clip_param=0.1,
                vf_loss_coeff=0.5,
                entropy_coeff=0.01,
                model={"vf_share_layers": True, **(NATURE if nature else {})},
            )
            .resources(
                num_cpus_for_main_process=main_cpus, num_gpus=gpus, num_gpus_per_env_runner=runner_gpus
            )
            .reporting(min_time_s_per_iteration=2)
            .framework("torch", **compiled)
            .debugging(seed=0, log_level="ERROR")
        )
    return (
        get_config_class("PPO")()
        .environment(env, clip_rewards=True)
        .env_runners(
            num_env_runners=env_runners, num_envs_per_env_runner=envs_per_runner, rollout_fragment_length=128
        )
        .training(
            train_batch_size=1024,
            minibatch_size=256,
            num_epochs=4,
            lr=2.5e-4,
            clip_param=0.1,
            vf_loss_coeff=0.5,
            entropy_coeff=0.01,
            kl_coeff=0.0,
            model={"vf_share_layers": True, **(NATURE if nature else {})},
        )
        # the driver's torch threads; its learner (and, with 0 runners, its inference) on a GPU
        .resources(num_cpus_for_main_process=main_cpus, num_gpus=gpus, num_gpus_per_env_runner=runner_gpus)
        .framework("torch", **compiled)
        .debugging(seed=0, log_level="ERROR")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="PongNoFrameskip-v4")
    parser.add_argument("--lib", choices=["rltrainer", "sb3"], default="rltrainer")
    parser.add_argument(
        "--nature", action="store_true", help="SB3's network size instead of RLlib's default filters"
    )
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--algo", choices=["PPO", "APPO"], default="PPO")
    parser.add_argument("--env-runners", default="0")
    parser.add_argument(
        "--main-cpus", type=int, default=2, help="the driver's torch threads (SB3 uses one per core: 2 here)"
    )
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs for the driver's learner")
    parser.add_argument(
        "--gpus-per-env-runner", type=float, default=0, help="GPUs per env runner: inference on CUDA"
    )
    parser.add_argument(
        "--torch-compile",
        default="",
        help="'learner', 'worker' or 'learner,worker': torch.compile them (the loss: complete_update)",
    )
    args = parser.parse_args()
    if args.lib == "sb3":
        rate = sb3_frames_per_s(args.env, args.iterations)
        print(f"sb3 PPO {args.env}: {rate:,.0f} frames/s")
        print_json_line({"env": args.env, "lib": "sb3", "frames_per_s": round(rate)})
        return
    figures = {
        "env": args.env,
        "lib": "rltrainer",
        "algo": args.algo,
        "network": "nature" if args.nature else "rllib",
        "num_gpus": args.num_gpus,
        "gpus_per_env_runner": args.gpus_per_env_runner,
        "torch_compile": args.torch_compile,
        "frames_per_s": {},
        "learn_ms": {},
    }
    print(f"{'runners':>7} {'frames/s':>9} {'sample ms':>9} {'learn ms':>9}")
    for runners in (int(n) for n in args.env_runners.split(",")):
        gpus = (args.num_gpus, args.gpus_per_env_runner)
        settings = {"algo": args.algo, "torch_compile": args.torch_compile}
        algo = config(args.env, runners, args.main_cpus, args.nature, *gpus, **settings).build()
        try:
            algo.train()  # start-up
            rates, sample_ms, learn_ms = [], [], []
            for _ in range(args.iterations):
                started = time.perf_counter()
                result = algo.train()
                rates.append(result["num_env_steps_sampled"] * FRAME_SKIP / (time.perf_counter() - started))
                sample_ms.append(result["timers"]["sample_time_ms"])
                learn_ms.append(result["timers"]["learn_time_ms"])
        finally:
            algo.stop()
        rate = median(rates)
        figures["frames_per_s"][str(runners)] = round(rate)
        figures["learn_ms"][str(runners)] = round(median(learn_ms), 1)
        print(f"{runners:>7} {rate:>9,.0f} {median(sample_ms):>9,.0f} {median(learn_ms):>9,.0f}")
    print_json_line(figures)


def sb3_frames_per_s(env: str, iterations: int) -> float:
    """SB3's PPO with the zoo's Atari settings: the median frames/s of an iteration (a rollout
    of 8 x 128 steps and its 4 epochs), timed from one rollout's start to the next's."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    starts: list[float] = []

    class RolloutStarts(BaseCallback):
        def _on_rollout_start(self) -> None:
            starts.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

    vec_env = VecFrameStack(make_atari_env(env, n_envs=8, seed=0), n_stack=4)
    model = PPO(
        "CnnPolicy", vec_env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4,
        clip_range=0.1, vf_coef=0.5, ent_coef=0.01, seed=0, verbose=0,
    )  # fmt: skip
    model.learn(total_timesteps=BATCH * (iterations + 2), callback=RolloutStarts())
    intervals = [b - a for a, b in zip(starts[1:], starts[2:], strict=False)]  # the first is start-up
    return median([BATCH * FRAME_SKIP / dt for dt in intervals])


if __name__ == "__main__":
    main()
