"""RLlib's external application API, measured like ``bench.policy_server`` measures ours:
``get_action`` requests per second and their latency (p50, p99) against one RLlib policy server,
with 1 and 16 concurrent clients. Runs in its own virtualenv with RLlib, never rltrainer's:

    /tmp/rllib-venv/bin/python -m bench.policy_server_rllib --clients 1,16 --seconds 10

RLlib version: ray[rllib]==2.38.0 (``pip install "ray[rllib]==2.38.0" torch==2.13.0``), the last
release where this API works. ``PolicyServerInput`` is gone from 2.50 on, and from 2.39 to 2.49 the
server's embedded RolloutWorker always uses EnvRunnerV2, which rejects the ExternalEnv that remote
(and local) inference needs ("Policies using the new Connector API do not support ExternalEnv");
2.38 still has ``enable_connectors=False`` for the old sampler.

The server is RLlib's ``PolicyServerInput`` (old API stack) feeding an untrained PPO on
CartPole's spaces with ``env=None``, ``num_env_runners=0`` and the [64, 64] ReLU fcnet, in its own
process that keeps calling ``algo.train()`` as RLlib's ``cartpole_server.py`` example does. Each
client is its own process with one ``PolicyClient(url, inference_mode="remote")`` and one long
episode started with ``training_enabled=False``, sending ``get_action`` back to back for
``--seconds`` after a 50-call warm-up and a common start time (sent once every client is ready); a
request's latency is the client's wall time for the call. RLlib's client pickles every request
(ray.cloudpickle) into an HTTP POST on a new connection (no session given; the server speaks
HTTP/1.0 and closes it anyway). Its ``HTTPServer`` keeps socketserver's listen backlog of 5, so
with many clients some connections are refused or reset: those calls are retried (their latency
includes the retries) and counted as ``connection_errors``. Not imported by tests.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.common import print_json_line

SERVER = """
import signal
import sys
import gymnasium as gym
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.env.policy_server_input import PolicyServerInput

port = int(sys.argv[1])
spaces = gym.make("CartPole-v1")
ray.init(include_dashboard=False)  # RLlib's example calls ray.init(); no dashboard to keep load down
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit through atexit: ray.shutdown() then
config = (
    PPOConfig()
    # PolicyServerInput needs the old API stack (RolloutWorker, Policy, ExternalEnv).
    .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
    .environment(env=None, observation_space=spaces.observation_space,
                 action_space=spaces.action_space)
    .framework("torch")
    .offline_data(input_=lambda ioctx: PolicyServerInput(ioctx, "127.0.0.1", port))
    # Old connectors off: the ExternalEnv behind remote inference needs the old sampler.
    .env_runners(num_env_runners=0, enable_connectors=False, rollout_fragment_length=1000)
    .training(train_batch_size=4000,
              model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
    .evaluation(off_policy_estimation_methods={})
    .debugging(log_level="WARN")
)
algo = config.build()  # the local worker's input creator starts the HTTP server thread
print("ready", flush=True)
# Serve and train, as cartpole_server.py does. With training_enabled=False episodes the collector
# drops the trajectories but still counts their steps: an iteration returns every 4000 get_action
# calls with 0 agent steps trained (no SGD); in between train() waits on PolicyServerInput.next().
while True:
    algo.train()
"""

CLIENT = """
import json, sys, time
import numpy as np
import requests
from ray.rllib.env.policy_client import PolicyClient
client = PolicyClient(sys.argv[1], inference_mode="remote")
errors = 0
def call(method, *args, **kwargs):  # retried on a refused or reset connection, which is counted
    global errors
    while True:
        try:
            return method(*args, **kwargs)
        except requests.exceptions.ConnectionError:
            errors += 1
episode_id = call(client.start_episode, training_enabled=False)
obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
for _ in range(50):  # warm-up
    call(client.get_action, episode_id, obs)
print("ready", flush=True)  # importing RLlib takes seconds: the start time comes once all are ready
start = float(sys.stdin.readline())
end = start + float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
latencies, errors = [], 0
while time.time() < end:
    t = time.perf_counter()
    call(client.get_action, episode_id, obs)  # a call's latency includes its retries
    latencies.append(time.perf_counter() - t)
print(json.dumps({"latencies": latencies, "errors": errors}))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(url: str, clients: int, seconds: float) -> dict[str, float]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, url, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(clients)
    ]
    try:
        for proc in procs:  # every client has imported RLlib, started its episode and warmed up
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("an RLlib policy client failed")
        start = time.time() + 1.0
        for proc in procs:
            proc.stdin.write(f"{start}\n")
            proc.stdin.flush()
        results = [json.loads(p.communicate()[0]) for p in procs]
    finally:
        for proc in procs:
            proc.kill()
    latencies = np.concatenate([r["latencies"] for r in results])
    return {
        "connection_errors": sum(r["errors"] for r in results),
        "requests_per_s": len(latencies) / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    port = free_port()
    figures = {}
    # The server's stderr (its HTTP handler logs every request there, as RLlib ships it) goes to a
    # file, shown only if the server fails to start.
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, stderr=log, text=True
        )
        try:
            if server.stdout.readline().strip() != "ready":
                log.seek(0)
                raise SystemExit(f"the RLlib policy server did not start:\n{log.read()[-5000:]}")
            url = f"http://127.0.0.1:{port}"
            for count in (int(c) for c in args.clients.split(",")):
                result = run(url, count, args.seconds)
                print(
                    f"{count:3d} client(s): {result['requests_per_s']:8.0f} requests/s, "
                    f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
                    f"{result['connection_errors']} connection errors (retried)",
                    flush=True,
                )
                figures.update({f"clients_{count}_{key}": value for key, value in result.items()})
        finally:
            server.terminate()
            server.wait(timeout=30)
    print_json_line(figures)


if __name__ == "__main__":
    main()
