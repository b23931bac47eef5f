"""Checkpoint cost (issue 4): size, save and restore time, locally and on S3, and the training
overhead of a checkpoint every iteration.

    python -m bench.checkpoint
    python -m bench.checkpoint --repeats 5 --iterations 20 --large-hiddens 2240,2240

Two models, each trained one iteration first so the checkpoint holds optimizer state:
PPO CartPole-v1 with the default network, and a PPO network of about 10M parameters
(``--large-hiddens``; the exact count is printed). For each, ``--repeats`` times, to a local
folder and to S3: the checkpoint's size (bytes, files), ``save()`` (S3: write to a temporary
folder, then upload), ``Algorithm.from_checkpoint`` (S3: download, verify, rebuild) and
``restore()`` into the running algorithm (the load alone, no rebuild). Figures are medians.

S3 is moto's server, started in this process on 127.0.0.1 with fake credentials set in this
process's environment: it measures the library's S3 path (requests, hashing, copies), not a
real network. Training overhead: seconds per ``train()`` iteration of a tiny PPO CartPole
(after one warm-up iteration) with ``checkpoint_frequency=1`` against 0, under a local and
an ``s3://`` ``storage_path`` (where result files are uploaded every iteration in both).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import median, print_json_line
from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.checkpoint_store import delete_checkpoint
from rltrainer.storage import open_storage

BUCKET = "bench"
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIABENCHFAKEKEY0000",
    "AWS_SECRET_ACCESS_KEY": "bench/fake/secret/key/0000000000000000000",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}
UNSET_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 with bucket ``bench``; fake credentials in os.environ meanwhile."""
    import boto3
    from moto.server import ThreadedMotoServer

    saved = {name: os.environ.get(name) for name in (*FAKE_ENV, *UNSET_ENV)}
    for name in UNSET_ENV:
        os.environ.pop(name, None)
    os.environ.update(FAKE_ENV)
    port = free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return time.perf_counter() - start, value


def ppo_config(
    storage_path: str, options: dict[str, Any], hiddens: list[int] | None, **training
) -> PPOConfig:
    model = {"fcnet_hiddens": hiddens} if hiddens is not None else {}
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=128, num_epochs=2, model=model, **training)
        .reporting(storage_path=storage_path, storage_options=options, experiment_name="bench")
        .debugging(seed=0)
    )


def save_restore(name: str, hiddens: list[int] | None, args: Any, tmp: Path, options: dict) -> dict:
    """Size, save, from_checkpoint and restore medians of one model, locally and on S3."""
    algo = ppo_config(str(tmp / name / "trials"), options, hiddens).build()
    times: dict[str, list[float]] = {}
    try:
        algo.train()  # the optimizer state exists after the first update
        params = sum(t.numel() for t in algo.learner_group.get_weights().values())
        sizes = []
        for i in range(args.repeats):
            for where in ("local", "s3"):
                if where == "local":
                    path = str(tmp / name / f"checkpoint_{i}")
                else:
                    path = f"s3://{BUCKET}/{name}/{time.time_ns()}/checkpoint_{i}"
                seconds, path = timed(algo.save, path)
                times.setdefault(f"{where}_save_s", []).append(seconds)
                if where == "local":
                    files = [p for p in Path(path).rglob("*") if p.is_file()]
                    sizes.append((sum(p.stat().st_size for p in files), len(files)))
                else:
                    stored = open_storage(path, options).list()
                    if len(stored) != sizes[-1][1]:
                        raise SystemExit(f"{path} holds {len(stored)} files, the local copy {sizes[-1][1]}")
                seconds, restored = timed(Algorithm.from_checkpoint, path, {"storage_options": options})
                restored.stop()
                times.setdefault(f"{where}_from_checkpoint_s", []).append(seconds)
                seconds, _ = timed(algo.restore, path)
                times.setdefault(f"{where}_restore_s", []).append(seconds)
                if where == "local":
                    shutil.rmtree(path)
                else:
                    delete_checkpoint(path, options)
    finally:
        algo.stop()
    figures: dict[str, Any] = {
        "hiddens": list(algo.config.model.fcnet_hiddens),
        "params": params,
        "bytes": int(median([b for b, _ in sizes])),
        "files": int(median([n for _, n in sizes])),
    }
    figures.update({key: median(values) for key, values in times.items()})
    return figures


def client_seconds(options: dict, repeats: int) -> float:
    """Median time for an S3 operation to get its boto3 client (cached per configuration)."""
    return median([timed(lambda: open_storage(f"s3://{BUCKET}", options).client)[0] for _ in range(repeats)])


def train_seconds(storage_path: str, options: dict, frequency: int, iterations: int) -> float:
    """Seconds per iteration over ``iterations`` train() calls after one warm-up call."""
    algo = ppo_config(storage_path, options, None).checkpointing(checkpoint_frequency=frequency).build()
    try:
        algo.train()
        seconds, _ = timed(lambda: [algo.train() for _ in range(iterations)])
    finally:
        algo.stop()
    return seconds / iterations


def training_overhead(args: Any, tmp: Path, options: dict) -> dict[str, dict[str, float]]:
    """Seconds per iteration with and without a checkpoint every iteration (medians over repeats)."""
    out = {}
    for where in ("local", "s3"):
        root = str(tmp / "training") if where == "local" else f"s3://{BUCKET}/training"
        runs: dict[int, list[float]] = {0: [], 1: []}
        for _ in range(args.repeats):
            for frequency in (0, 1):  # interleaved, so the machine's drift hits both alike
                runs[frequency].append(train_seconds(root, options, frequency, args.iterations))
        plain, checkpointed = median(runs[0]), median(runs[1])
        out[where] = {
            "iter_s": plain,
            "iter_ckpt_s": checkpointed,
            "overhead_s": checkpointed - plain,
            "overhead_ratio": checkpointed / plain,
        }
    return out


def report(cases: dict[str, dict], training: dict[str, dict], client_s: float, args: Any) -> dict[str, Any]:
    print(f"\nmedians over {args.repeats} repeats (S3: moto on 127.0.0.1, in this process)")
    print(
        f"{'model':<18}{'params':>12}{'bytes':>13}{'files':>7}  {'where':<7}{'save s':>9}"
        f"{'from_ckpt s':>13}{'restore s':>11}"
    )
    for name, c in cases.items():
        for where in ("local", "s3"):
            head = (
                f"{name:<18}{c['params']:>12,}{c['bytes']:>13,}{c['files']:>7}"
                if where == "local"
                else " " * 50
            )
            print(
                f"{head}  {where:<7}{c[f'{where}_save_s']:>9.3f}{c[f'{where}_from_checkpoint_s']:>13.3f}"
                f"{c[f'{where}_restore_s']:>11.3f}"
            )
    print(f"\ntraining: tiny PPO CartPole, {args.iterations} iterations after a warm-up, per iteration")
    print(f"{'storage':<9}{'no ckpt s':>11}{'ckpt/iter s':>13}{'added s':>10}{'ratio':>8}")
    for where, t in training.items():
        print(
            f"{where:<9}{t['iter_s']:>11.4f}{t['iter_ckpt_s']:>13.4f}{t['overhead_s']:>10.4f}"
            f"{t['overhead_ratio']:>8.2f}"
        )
    print(f"\nmaking a boto3 S3 client (cached per storage configuration): {client_s:.3f} s")
    figures: dict[str, Any] = {
        "repeats": args.repeats,
        "iterations": args.iterations,
        "s3_client_s": client_s,
    }
    for name, c in cases.items():
        figures.update({f"{name}_{key}": value for key, value in c.items()})
    for where, t in training.items():
        figures.update({f"train_{where}_{key}": value for key, value in t.items()})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10, help="train() calls per overhead run")
    parser.add_argument(
        "--large-hiddens",
        default="2240,2240",
        help="hidden sizes of the ~10M-parameter policy and value nets",
    )
    args = parser.parse_args()
    large = [int(size) for size in args.large_hiddens.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="rltrainer_bench_checkpoint_"))
    try:
        with moto_s3() as endpoint:
            options = {"endpoint_url": endpoint}
            cases = {}
            for name, hiddens in (("cartpole_default", None), ("large", large)):
                print(f"save/restore: {name} ...", flush=True)
                cases[name] = save_restore(name, hiddens, args, tmp, options)
                print(f"  {cases[name]['params']:,} parameters, hiddens {cases[name]['hiddens']}", flush=True)
            print("training overhead ...", flush=True)
            training = training_overhead(args, tmp, options)
            client_s = client_seconds(options, max(args.repeats, 5))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_json_line(report(cases, training, client_s, args))


if __name__ == "__main__":
    main()
