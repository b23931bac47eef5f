"""The external application API's speed: ``get_action`` requests per second and their latency
(p50, p99) against one policy server, with 1 and 16 concurrent clients.

    python -m bench.policy_server                      # 1 and 16 clients, 10 s each
    python -m bench.policy_server --clients 1,4,16 --seconds 5

The server is ``rltrainer serve`` on a CartPole PPO policy (the tuned example's [64, 64] ReLU
network, untrained: inference costs the same), in its own process, on 127.0.0.1. Each client is
its own process (one ``PolicyClient`` in remote mode, one kept-alive connection) sending
``GET_ACTION`` for one long episode, back to back, for ``--seconds``; a request's latency is
the client's wall time for the call. Everything runs on this machine's cores, server and
clients together.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import print_json_line

ROOT = Path(__file__).resolve().parent.parent
CLIENT = """
import json, sys, time
import numpy as np
from rltrainer.offline.policy_client import PolicyClient
client = PolicyClient(sys.argv[1])
episode_id = client.start_episode(training_enabled=False)
obs = [0.01, -0.02, 0.03, 0.04]
for _ in range(50):  # warm-up
    client.get_action(episode_id, obs)
start, end = float(sys.argv[2]), float(sys.argv[2]) + float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
latencies = []
while time.time() < end:
    t = time.perf_counter()
    client.get_action(episode_id, obs)
    latencies.append(time.perf_counter() - t)
print(json.dumps(latencies))
"""


def make_checkpoint(folder: Path) -> str:
    from rltrainer.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
        .reporting(storage_path=str(folder))
    )
    algo = config.build()
    path = algo.save()
    algo.stop()
    return path


def run(url: str, clients: int, seconds: float, env: dict[str, str]) -> dict[str, float]:
    start = time.time() + 3.0  # every client has started and warmed up by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, url, str(start), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(clients)
    ]
    latencies = np.concatenate([json.loads(p.communicate()[0]) for p in procs])
    return {
        "requests_per_s": len(latencies) / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    figures = {}
    with tempfile.TemporaryDirectory(prefix="rltrainer_bench_server_") as tmp:
        checkpoint = make_checkpoint(Path(tmp))
        server = subprocess.Popen(
            [sys.executable, "-m", "rltrainer", "serve", checkpoint, "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            url = server.stdout.readline().rsplit(" on ", 1)[1].strip()
            for count in (int(c) for c in args.clients.split(",")):
                result = run(url, count, args.seconds, env)
                print(
                    f"{count:3d} client(s): {result['requests_per_s']:8.0f} requests/s, "
                    f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms",
                    flush=True,
                )
                figures.update({f"clients_{count}_{key}": value for key, value in result.items()})
        finally:
            server.terminate()
            server.wait(timeout=30)
    print_json_line(figures)


if __name__ == "__main__":
    main()
