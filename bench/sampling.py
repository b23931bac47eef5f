"""Env-runner sampling throughput (policy inference included) against the stepping ceiling:
the same vector env stepped with random actions. BENCHMARKS.md, "Sampling throughput".

    python -m bench.sampling --envs 1,8,64
    python -m bench.sampling --envs 8,64 --env-runners 0,1,2

Each repeat measures our sampling and the ceiling back to back and the ratio is the median
of those pairs, so the machine's drift (large on shared 2-core machines) cancels out.
With ``--env-runners N`` (N >= 1) the figure is the group's parallel sampling rate as the
driver sees it (rollouts shipped back through Ray), next to the single-process one.

``--breakdown`` also prints, per vector size, what one step of the driver's env runner costs:
the policy network alone, inference (network, sampling, actions), the env's own step, and the
whole env-runner step (inference, env step and recording).

``--callbacks`` measures the cost of callbacks: ``none`` (the default), ``episode`` (custom
metrics set in ``on_episode_start``/``on_episode_end``: the vectorized tracking path) or
``step`` (an ``on_episode_step`` as well: a Python call per env and step).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import gymnasium as gym

from bench.common import median, print_json_line
from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.env_context import EnvContext
from rltrainer.env.vector_env import make_vector_env


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


class EpisodeCallbacks(DefaultCallbacks):
    """What a typical custom metric costs: one hook at each end of an episode."""

    def on_episode_start(self, *, episode, **_):
        episode.user_data["start"] = episode.last_observation[0]

    def on_episode_end(self, *, episode, **_):
        episode.custom_metrics["drift"] = episode.last_observation[0] - episode.user_data["start"]


class StepCallbacks(EpisodeCallbacks):
    def on_episode_step(self, *, episode, **_):
        episode.user_data["last_action"] = episode.last_action


CALLBACKS = {"none": DefaultCallbacks, "episode": EpisodeCallbacks, "step": StepCallbacks}


def build(
    env_id: str,
    num_envs: int,
    env_runners: int,
    hiddens: list[int],
    activation: str,
    storage: str,
    callbacks: type = DefaultCallbacks,
):
    fragment = max(1, 2048 // num_envs)
    config = (
        PPOConfig()
        .environment(env_id)
        .env_runners(
            num_env_runners=env_runners, num_envs_per_env_runner=num_envs, rollout_fragment_length=fragment
        )
        .training(
            model={"fcnet_hiddens": hiddens, "fcnet_activation": activation},
            train_batch_size=fragment * num_envs * max(1, env_runners),
        )
        .reporting(storage_path=storage)
        .callbacks(callbacks)
    )
    return config.build()


def sampling(algo, seconds: float) -> float:
    """Env steps/s of the env runners' sampling, counting every env.step slot."""
    group = algo.env_runner_group
    group.sample(algo.config.train_batch_size)  # warm up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        rollouts, _ = group.sample(algo.config.train_batch_size)
        steps += sum(rollout.valid.size for rollout in rollouts)
    return steps / (time.perf_counter() - start)


def per_call_us(fn, seconds: float) -> float:
    """Median over 5 rounds of the mean time of one ``fn()`` call, in microseconds."""
    fn()
    rounds = []
    for _ in range(5):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 5:
            for _ in range(50):
                fn()
            calls += 50
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return median(rounds)


def breakdown(algo, seconds: float) -> dict[str, float]:
    """Microseconds per step of the driver's env runner, by part (see the module docstring)."""
    runner = algo.env_runner_group.local_worker()
    rollout, _ = runner.sample()  # envs reset and running
    policy, flat_obs = runner.policy, rollout.obs[-1]
    network = policy.model.numpy_policy()
    actions = policy.compute(flat_obs, True)["env_actions"]
    parts = {
        "network_us": per_call_us(lambda: network(flat_obs), seconds),
        "inference_us": per_call_us(lambda: policy.compute(flat_obs, True), seconds),
        "env_step_us": per_call_us(lambda: runner.env.step(actions), seconds),
    }
    # Per env.step slot of a whole rollout (reset steps included, as the ceiling counts them).
    slots = []
    for _ in range(5):
        start = time.perf_counter()
        rollout, _ = runner.sample()
        slots.append((time.perf_counter() - start) * 1e6 / (rollout.valid.size / runner.num_envs))
    parts["env_runner_step_us"] = median(slots)
    return {k: round(v, 1) for k, v in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", default="1,8,64", help="comma-separated vector sizes per env runner")
    parser.add_argument("--env-runners", default="0", help="comma-separated num_env_runners values")
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="medians over this many measurements")
    parser.add_argument("--hiddens", default="64,64", help="policy MLP hidden sizes")
    parser.add_argument("--activation", default="tanh", help="policy MLP activation (tuned example: relu)")
    parser.add_argument("--breakdown", action="store_true", help="also time the parts of one env-runner step")
    parser.add_argument(
        "--callbacks", choices=sorted(CALLBACKS), default="none", help="callbacks to sample with"
    )
    args = parser.parse_args()
    hiddens = [int(h) for h in args.hiddens.split(",")]
    print(
        f"{args.env}, MLP {hiddens} {args.activation}, callbacks {args.callbacks}, "
        f"medians of {args.repeats} x {args.seconds:.0f} s"
    )
    print(f"{'runners':>7} {'envs':>5} {'sampling steps/s':>17} {'ceiling steps/s':>16} {'ratio':>7}")
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as storage:
        for env_runners in (int(r) for r in args.env_runners.split(",")):
            for num_envs in (int(n) for n in args.envs.split(",")):
                algo = build(
                    args.env,
                    num_envs,
                    env_runners,
                    hiddens,
                    args.activation,
                    storage,
                    CALLBACKS[args.callbacks],
                )
                parts = breakdown(algo, args.seconds) if args.breakdown and not env_runners else {}
                pairs = [
                    (sampling(algo, args.seconds), ceiling(args.env, num_envs, args.seconds))
                    for _ in range(args.repeats)
                ]
                algo.stop()
                if env_runners:  # the next size may need a larger local Ray instance
                    import ray

                    ray.shutdown()
                ours, top = median([p[0] for p in pairs]), median([p[1] for p in pairs])
                ratio = median([p[0] / p[1] for p in pairs])
                figures[f"{env_runners}x{num_envs}"] = {
                    "env_runners": env_runners,
                    "envs_per_runner": num_envs,
                    "steps_per_s": round(ours),
                    "ceiling_steps_per_s": round(top),
                    "ratio": round(ratio, 3),
                    **parts,
                }
                print(f"{env_runners:>7} {num_envs:>5} {ours:>17,.0f} {top:>16,.0f} {ratio:>7.1%}")
                if parts:
                    timings = ", ".join(f"{name[:-3]} {us:.1f}" for name, us in parts.items())
                    print(f"        per step (us): {timings}")
    print_json_line(
        {
            "env": args.env,
            "gym_version": gym.__version__,
            "hiddens": hiddens,
            "activation": args.activation,
            "callbacks": args.callbacks,
            "sampling": figures,
        }
    )


if __name__ == "__main__":
    main()
