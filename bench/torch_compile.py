"""What ``torch_compile_learner`` and ``torch_compile_worker`` buy, on the CPU or a GPU.

Learner: one PPO update (``update_from_batch``: 4 epochs of minibatches, as the tuned examples
train) on a fixed synthetic batch, eager against ``torch.compile`` of the forward pass
(``forward_train``) or of each minibatch's whole loss (``complete_update``), optionally with a
compile mode (``reduce-overhead``: CUDA graphs). Two networks: CartPole's MLP (4 -> 256 -> 256,
2 actions; 4,096-step batch, 128-step minibatches) and the Atari conv stack on 84x84x4 uint8
frames (6 actions; 1,024-frame batch, 256-frame minibatches, bench/atari.py's settings).

Worker: ``policy.compute`` on a batch of observations (8 and 64 rows) through numpy inference,
eager torch, and ``torch.compile``.

Each figure is the median of ``--repeats`` timed calls after ``--warmup`` untimed ones (the
first of which compiles; its time is reported as ``compile_s``).

    python -m bench.torch_compile [--device cpu|cuda] [--cases mlp,cnn] [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

CASES: dict[str, dict[str, Any]] = {
    "mlp": {"obs": (4,), "dtype": np.float32, "actions": 2, "batch": 4096, "minibatch": 128},
    "cnn": {"obs": (84, 84, 4), "dtype": np.uint8, "actions": 6, "batch": 1024, "minibatch": 256},
}
LEARNER_MODES = {
    "eager": {},
    "forward_train": {"torch_compile_learner": True},
    "complete_update": {
        "torch_compile_learner": True,
        "torch_compile_learner_what_to_compile": "complete_update",
    },
    "forward_train+reduce-overhead": {
        "torch_compile_learner": True,
        "torch_compile_learner_dynamo_mode": "reduce-overhead",
    },
    "complete_update+reduce-overhead": {
        "torch_compile_learner": True,
        "torch_compile_learner_what_to_compile": "complete_update",
        "torch_compile_learner_dynamo_mode": "reduce-overhead",
    },
}


def spaces_for(case: dict[str, Any]) -> tuple[Any, Any]:
    from gymnasium import spaces

    high = 255 if case["dtype"] == np.uint8 else np.inf
    obs = spaces.Box(0 if high == 255 else -high, high, shape=case["obs"], dtype=case["dtype"])
    return obs, spaces.Discrete(case["actions"])


def config_for(case: dict[str, Any], **framework: Any) -> Any:
    from rltrainer.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .training(
            train_batch_size=case["batch"],
            minibatch_size=case["minibatch"],
            num_epochs=4,
            kl_coeff=0.2,
            # bench/atari.py's network: one conv trunk for the policy and the value
            model={"vf_share_layers": case["dtype"] == np.uint8},
        )
        .framework("torch", **framework)
        .debugging(seed=0)
    )


def timed(fn: Any, warmup: int, repeats: int, sync: Any) -> tuple[float, float]:
    """(seconds of the first call, median seconds of the timed calls)."""
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def bench_learner(name: str, mode: str, device: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from rltrainer.algorithms.ppo import PPO
    from rltrainer.algorithms.ppo.ppo_learner import PPOBatch
    from rltrainer.core.learner import make_learner

    torch._dynamo.reset()
    case = CASES[name]
    obs_space, act_space = spaces_for(case)
    config = config_for(case, **LEARNER_MODES[mode])
    learner = make_learner(PPO.learner_class, obs_space, act_space, config, device)
    rng = np.random.default_rng(0)
    n = case["batch"]
    obs = rng.integers(0, 256, (n, *case["obs"])).astype(case["dtype"])
    batch = PPOBatch(
        obs.reshape(n, -1),  # rows as the runners' rollouts hold them (the model restores frames)
        rng.integers(0, case["actions"], n),
        np.full(n, -np.log(case["actions"]), np.float32),
        rng.normal(size=n).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
    )
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    steps = iter(range(10**9))
    first, median = timed(
        lambda: learner.update_from_batch(batch, next(steps)), args.warmup, args.repeats, sync
    )
    minibatches = 4 * (n // case["minibatch"])
    return {
        "part": "learner",
        "case": name,
        "mode": mode,
        "device": device,
        "update_ms": round(median * 1e3, 2),
        "minibatch_ms": round(median * 1e3 / minibatches, 3),
        "samples_per_s": round(4 * n / median),
        "compile_s": round(first - median, 2),
    }


def bench_worker(name: str, mode: str, rows: int, device: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from rltrainer.core.torch_compile import worker_compile_kwargs

    torch._dynamo.reset()
    case = CASES[name]
    obs_space, act_space = spaces_for(case)
    config = config_for(case, **({"torch_compile_worker": True} if mode == "compiled" else {}))
    policy = config.get_policy_class()(obs_space, act_space, config, seed=0)
    policy.set_device(device, gpu_code_path=mode != "numpy", compile_kwargs=worker_compile_kwargs(config))
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (rows, *case["obs"])).astype(case["dtype"])
    flat = np.concatenate([policy.preprocessor.transform_one(o) for o in obs])
    first, median = timed(lambda: policy.compute(flat, explore=True), args.warmup, args.repeats, lambda: None)
    return {
        "part": "worker",
        "case": name,
        "mode": mode,
        "rows": rows,
        "device": device,
        "call_us": round(median * 1e6, 1),
        "compile_s": round(first - median, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--cases", default="mlp,cnn")
    parser.add_argument("--learner-modes", default="eager,forward_train,complete_update")
    parser.add_argument("--worker-modes", default="numpy,eager,compiled")
    parser.add_argument("--rows", default="8,64")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps({"torch": torch.__version__, "device": args.device, "threads": torch.get_num_threads()}))
    for name in args.cases.split(","):
        for mode in filter(None, args.learner_modes.split(",")):
            print(json.dumps(bench_learner(name, mode, args.device, args)), flush=True)
        for rows in map(int, args.rows.split(",")):
            for mode in filter(None, args.worker_modes.split(",")):
                if mode == "numpy" and (args.device != "cpu" or name == "cnn"):
                    continue  # numpy inference is the CPU's MLP path only
                print(json.dumps(bench_worker(name, mode, rows, args.device, args)), flush=True)


if __name__ == "__main__":
    main()
