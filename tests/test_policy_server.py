"""The external application API: a policy server in the env runner, ``PolicyClient`` in remote
and local inference mode, and ``rltrainer serve CHECKPOINT``.

Real HTTP on 127.0.0.1 throughout (ephemeral ports); the training test's client drives
CartPole in another process, and several clients (remote and local mode) share one server.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.errors import ConfigError
from rltrainer.offline.policy_client import PolicyClient, PolicyClientError
from rltrainer.offline.policy_server import InferenceServer, PolicyServerInput
from rltrainer.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = gym.make("CartPole-v1")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_config(config_class=PPOConfig, port: int = 0, **input_config) -> PPOConfig:
    config = (
        config_class()
        .environment(None, observation_space=CARTPOLE.observation_space, action_space=CARTPOLE.action_space)
        .offline_data(input_="server", input_config={"port": port, **input_config})
        .debugging(seed=0)
    )
    return config


def play(
    client: PolicyClient, episodes: int, seed: int = 0, stop: threading.Event | None = None
) -> list[float]:
    """Episodes of CartPole driven through ``client``; their returns."""
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        if stop is not None and stop.is_set():
            break
        episode_id = client.start_episode()
        obs, _ = env.reset(seed=seed + i)
        total = 0.0
        while True:
            action = client.get_action(episode_id, obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            client.log_returns(episode_id, reward)
            total += reward
            if terminated or truncated:
                client.end_episode(episode_id, obs, truncated=truncated)
                break
        returns.append(total)
    return returns


def post(port: int, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(
        "POST", "/", body=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    response = connection.getresponse()
    payload = json.loads(response.read())
    connection.close()
    return response.status, payload


@pytest.fixture
def inference_server():
    policy = PPOConfig().environment("CartPole-v1").training(model={"fcnet_hiddens": [8]})
    policy = Policy(CARTPOLE.observation_space, CARTPOLE.action_space, policy)
    from rltrainer.core.filters import NoFilter

    server = InferenceServer(policy, NoFilter(4), port=0)
    yield server
    server.stop()


def test_bad_requests_get_4xx_and_the_server_keeps_serving(inference_server) -> None:
    port = inference_server.port
    assert post(port, b"{not json")[0] == 400
    status, reply = post(port, json.dumps({"command": "FLY"}).encode())
    assert status == 400 and "unknown command 'FLY'; commands: START_EPISODE" in reply["error"]
    status, reply = post(
        port, json.dumps({"command": "GET_ACTION", "episode_id": "nope", "observation": [0] * 4}).encode()
    )
    assert status == 404 and "unknown episode_id 'nope': START_EPISODE first" in reply["error"]
    status, reply = post(port, json.dumps({"command": "COMPUTE_ACTION", "observation": [0, 1]}).encode())
    assert status == 400 and "shape (2,); this policy's observations have shape (4,)" in reply["error"]
    status, reply = post(
        port, json.dumps({"command": "COMPUTE_ACTION", "observation": [0, 0, "x", 0]}).encode()
    )
    assert status == 400
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # the body is never read
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n" + b" " * 1000)
        answer = sock.makefile("rb").read().decode()
    assert answer.startswith("HTTP/1.1 413") and "takes at most 1048576" in answer
    client = PolicyClient(f"127.0.0.1:{port}")
    episode_id = client.start_episode()
    with pytest.raises(
        PolicyClientError, match=r"refused LOG_RETURNS \(400\): reward must be a finite number"
    ):
        client.log_returns(episode_id, float("nan"))
    with pytest.raises(
        PolicyClientError, match=r"refused START_EPISODE \(400\): episode '.*' is already running"
    ):
        client.start_episode(episode_id)
    assert client.get_action(episode_id, CARTPOLE.observation_space.sample()) in (0, 1)  # still serving
    health = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    health.request("GET", "/healthz")
    assert json.loads(health.getresponse().read()) == {"status": "ok"}


def test_tokens(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    policy = Policy(CARTPOLE.observation_space, CARTPOLE.action_space, PPOConfig().environment("CartPole-v1"))
    from rltrainer.core.filters import NoFilter

    with pytest.raises(
        ConfigError, match=r"listening on 0\.0\.0\.0 .* needs a bearer token: .*RLTRAINER_POLICY_SERVER_TOKEN"
    ):
        InferenceServer(policy, NoFilter(4), address="0.0.0.0", port=0)
    (tmp_path / "token").write_text("s3cret-from-file\n")
    server = InferenceServer(policy, NoFilter(4), port=0, token_file=str(tmp_path / "token"))
    try:
        body = json.dumps({"command": "COMPUTE_ACTION", "observation": [0.0] * 4}).encode()
        assert post(server.port, body)[0] == 401
        assert post(server.port, body, {"Authorization": "Bearer wrong"})[0] == 401
        assert post(server.port, body, {"Authorization": "Bearer s3cret-from-file"})[0] == 200
        monkeypatch.setenv("RLTRAINER_POLICY_SERVER_TOKEN", "s3cret-from-file")  # the client's default
        client = PolicyClient(f"http://127.0.0.1:{server.port}")
        assert client.get_action(client.start_episode(), [0.0] * 4) in (0, 1)
    finally:
        server.stop()


CLIENT_SCRIPT = textwrap.dedent(
    """
    import sys, gymnasium as gym
    from rltrainer.offline.policy_client import PolicyClient
    client = PolicyClient(sys.argv[1], inference_mode="remote")
    env = gym.make("CartPole-v1")
    for i in range(100000):
        episode_id = client.start_episode()
        obs, _ = env.reset(seed=i)
        while True:
            action = client.get_action(episode_id, obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            client.log_returns(episode_id, reward)
            if terminated or truncated:
                client.end_episode(episode_id, obs, truncated=truncated)
                break
    """
)


def test_ppo_learns_from_a_client_in_another_process(tmp_path: Path) -> None:
    port = free_port()
    config = server_config(port=port).training(
        train_batch_size=1000,
        minibatch_size=250,
        num_epochs=10,
        lr=1e-3,
        model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
    )
    algo = config.reporting(storage_path=str(tmp_path), metrics_num_episodes_for_smoothing=20).build()
    (tmp_path / "client.py").write_text(CLIENT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    client = subprocess.Popen(
        [sys.executable, str(tmp_path / "client.py"), f"http://127.0.0.1:{port}"], env=env
    )
    results = []
    try:
        # Up to 12 iterations, ending at the first that passes the check below.
        while len(results) < 12 and not (
            results and learned(results[0]["episode_return_mean"], results[-1]["episode_return_mean"])
        ):
            results.append(algo.train())
    finally:
        client.kill()
        client.wait()
        algo.stop()
    assert all(r["num_env_steps_sampled"] == 1000 for r in results)
    assert results[0]["episodes_this_iter"] > 0  # the clients' episodes are the results' episodes
    first, last = results[0]["episode_return_mean"], results[-1]["episode_return_mean"]
    assert learned(first, last), [r["episode_return_mean"] for r in results]


def learned(first: float, last: float) -> bool:
    return last > max(2 * first, 80)


def test_several_clients_remote_and_local_share_one_server(tmp_path: Path) -> None:
    port = free_port()
    config = server_config(port=port).training(train_batch_size=200, minibatch_size=100, num_epochs=1)
    algo = config.reporting(storage_path=str(tmp_path)).build()
    stop = threading.Event()
    url = f"http://127.0.0.1:{port}"
    clients = [
        PolicyClient(url),
        PolicyClient(url),
        PolicyClient(url, inference_mode="local", update_interval=0.2),
    ]
    threads = [
        threading.Thread(target=play, args=(c, 10_000, 100 * i, stop), daemon=True)
        for i, c in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            result = algo.train()
            assert result["num_env_steps_sampled"] == 200
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        local = clients[2]
        local.update_policy_weights()  # the local copy acts with the server's current weights
        server_weights = algo.env_runner_group.local_worker().get_weights()
        for name, value in server_weights.items():
            np.testing.assert_allclose(local._policy.get_weights()[name], value)
        algo.stop()
    assert result["episodes_total"] >= 3


def test_off_policy_algorithms_and_the_documents_lambda(tmp_path: Path) -> None:
    port = free_port()
    config = (
        server_config(DQNConfig)
        .offline_data(input_=lambda ioctx: PolicyServerInput(ioctx, "127.0.0.1", port))
        .training(num_steps_sampled_before_learning_starts=0, train_batch_size=32)
        .env_runners(rollout_fragment_length=50)
        .reporting(storage_path=str(tmp_path))
    )
    assert config.to_dict()["input"].endswith(
        ":test_off_policy_algorithms_and_the_documents_lambda.<locals>.<lambda>"
    )
    algo = config.build()
    stop = threading.Event()
    thread = threading.Thread(
        target=play, args=(PolicyClient(f"127.0.0.1:{port}"), 10_000, 0, stop), daemon=True
    )
    thread.start()
    try:
        result = algo.train()
    finally:
        stop.set()
        thread.join(timeout=30)
        algo.stop()
    assert len(algo.replay_buffer) == result["timesteps_total"] >= 50


def test_no_env_configs_say_what_they_need(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"no env set.*may set env=None with observation_space and action_space"
    ):
        PPOConfig().offline_data(input_="server").validate()
    with pytest.raises(ConfigError, match=r"evaluation runs episodes in an env, and this config has none"):
        server_config().evaluation(evaluation_interval=1).validate()
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['prot'\]; allowed: format, address, port"):
        server_config(prot=1)
    with pytest.raises(ConfigError, match=r"'server' cannot be one of a list of paths"):
        PPOConfig().offline_data(input_=["server", "x"])
    for bad, allowed in [
        ({"port": 70000}, "port must be an integer from 0 to 65535"),
        ({"port": "9900"}, "port must be an integer from 0 to 65535"),
        ({"max_queued_rows": 0}, "max_queued_rows must be a positive integer, got 0"),
        ({"address": 127}, "address must be a string, got 127"),
    ]:
        with pytest.raises(ConfigError, match=allowed):
            server_config(**bad)
    with pytest.raises(ConfigError, match="port must be an integer from 0 to 65535, got 65536"):
        InferenceServer(None, None, port=65536)
    port = free_port()
    first = server_config(port=port).reporting(storage_path=str(tmp_path)).build()
    try:
        with pytest.raises(ConfigError, match=rf"cannot listen on 127\.0\.0\.1:{port} .*choose another port"):
            server_config(port=port).reporting(storage_path=str(tmp_path)).build()
    finally:
        first.stop()


def test_serve_a_checkpoint_from_the_command_line(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
    )
    algo = (
        config.env_runners(observation_filter="MeanStdFilter").reporting(storage_path=str(tmp_path)).build()
    )
    algo.train()
    checkpoint = algo.save()
    obs = np.array([0.01, -0.2, 0.03, 0.3], dtype=np.float32)
    expected = algo.compute_single_action(obs, explore=False)
    algo.stop()
    policy = Policy.from_checkpoint(checkpoint)  # the filter's statistics come with it
    assert policy.observation_filter.get_state()["count"] > 0
    serve = subprocess.Popen(
        [sys.executable, "-m", "rltrainer", "serve", checkpoint, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        line = serve.stdout.readline()
        assert line.startswith("serving the PPO policy of "), line
        url = line.rsplit(" on ", 1)[1].strip()
        client = PolicyClient(url)
        assert client.get_action(client.start_episode(), obs) == expected
        client.log_returns(client.start_episode(), 1.0)  # accepted, not learned from
    finally:
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0


def test_ppo_checkpoint_with_server_input_restores(tmp_path: Path) -> None:
    config = server_config(port=free_port()).training(train_batch_size=64, minibatch_size=64, num_epochs=1)
    algo = config.reporting(storage_path=str(tmp_path)).build()
    checkpoint = algo.save()
    algo.stop()
    restored = PPO.from_checkpoint(checkpoint, {"input_config": {"port": free_port()}})
    assert restored.config.input_ == "server"
    restored.stop()


@pytest.mark.usefixtures("local_ray")
def test_each_remote_runner_serves_on_its_own_port(tmp_path: Path) -> None:
    port = free_port()
    config = server_config(port=port).env_runners(num_env_runners=2, rollout_fragment_length=50)
    algo = config.training(train_batch_size=100, minibatch_size=100, num_epochs=1)
    algo = algo.reporting(storage_path=str(tmp_path)).build()
    assert algo.env_runner_group.local_worker().offline_input is None  # the driver's runner serves nothing
    stop = threading.Event()
    clients = [PolicyClient(f"127.0.0.1:{port + i}") for i in range(2)]  # runner i on port + i - 1
    threads = [threading.Thread(target=play, args=(c, 10_000, 0, stop), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    try:
        result = algo.train()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        algo.stop()
    assert result["num_env_steps_sampled"] == 100 and result["episodes_total"] > 0


def test_clients_faster_than_training_keep_the_freshest_steps() -> None:
    from rltrainer.core.filters import NoFilter
    from rltrainer.offline.policy_service import PolicyService, _Policy

    policy = Policy(CARTPOLE.observation_space, CARTPOLE.action_space, PPOConfig().environment("CartPole-v1"))
    service = PolicyService(
        _Policy(policy, NoFilter(4), True),
        records=True,
        token=None,
        max_request_bytes=1 << 20,
        max_queued_rows=12,
    )
    for episode in range(3):  # 3 episodes of 6 steps: the first one is dropped
        episode_id = service.handle({"command": "START_EPISODE"})["episode_id"]
        for t in range(6):
            service.handle(
                {"command": "GET_ACTION", "episode_id": episode_id, "observation": [episode, t, 0, 0]}
            )
            service.handle({"command": "LOG_RETURNS", "episode_id": episode_id, "reward": 1.0})
        service.handle(
            {"command": "END_EPISODE", "episode_id": episode_id, "observation": [episode, 6, 0, 0]}
        )
    assert service.finished_rows == 12 and service.dropped_rows == 6
    rollout = service.next(12)
    assert rollout.obs[rollout.valid][:, 0].tolist() == [1.0] * 6 + [2.0] * 6
    assert len(service.pop_episodes()) == 3
