"""What ``compress_observations`` saves and costs on pixel observations.

A PPO Atari rollout as the env runners make it (``PongNoFrameskip-v4``, bench/atari.py's
settings: 84x84 uint8 frames stacked by 4, 8 envs x 128 steps): its observations' bytes raw
and lz4-compressed, and the time to compress (in the runner) and decompress (in the driver);
then sampling through 2 remote env runners with and without compression, alternating, in env
steps per second (one machine: nothing crosses a network here, so this is the cost side only).

    python -m bench.compression [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="PongNoFrameskip-v4")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from bench.atari import config
    from rltrainer.env.env_runner import EnvRunner
    from rltrainer.utils.compression import pack, unpack

    runner = EnvRunner(config(args.env, env_runners=0, main_cpus=1))
    rollout, _ = runner.sample()
    runner.stop()
    raw = rollout.obs.nbytes
    packs, unpacks, sizes = [], [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        packed = pack(rollout.obs)
        packs.append(time.perf_counter() - start)
        start = time.perf_counter()
        unpack(packed)
        unpacks.append(time.perf_counter() - start)
        sizes.append(packed.nbytes)
    figures = {
        "rollout": f"{rollout.obs.shape[0]} steps x {rollout.obs.shape[1]} envs, {rollout.obs.dtype}",
        "raw_mb": raw / 2**20,
        "packed_mb": statistics.median(sizes) / 2**20,
        "ratio": raw / statistics.median(sizes),
        "pack_ms": statistics.median(packs) * 1000,
        "unpack_ms": statistics.median(unpacks) * 1000,
    }
    print(
        f"{figures['rollout']}: {figures['raw_mb']:.1f} MiB raw, {figures['packed_mb']:.2f} MiB packed "
        f"({figures['ratio']:.1f}x smaller); pack {figures['pack_ms']:.1f} ms, "
        f"unpack {figures['unpack_ms']:.1f} ms"
    )
    rates: dict[bool, list[float]] = {False: [], True: []}
    for compress in [False, True] * 2:
        algo_config = config(args.env, env_runners=2, main_cpus=1)
        algo_config.env_runners(compress_observations=compress).resources(num_cpus_per_env_runner=0.5)
        algo = algo_config.build()
        try:
            algo.env_runner_group.sample(1024)  # warm-up
            start = time.perf_counter()
            steps = 0
            for _ in range(args.rounds):
                rollouts, _ = algo.env_runner_group.sample(1024)
                steps += sum(r.num_steps for r in rollouts)
            rates[compress].append(steps / (time.perf_counter() - start))
        finally:
            algo.stop()
    figures["sampling_steps_per_s"] = {str(k): statistics.median(v) for k, v in rates.items()}
    print(
        f"sampling with 2 remote runners: {figures['sampling_steps_per_s']['False']:,.0f} env steps/s "
        f"raw, {figures['sampling_steps_per_s']['True']:,.0f} compressed"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
