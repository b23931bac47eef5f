"""``.offline_data(input_=...)``: recorded rows as training batches, and BC / MARWIL on them.

The reader's layout is checked against the rows it read (every row's transition is the
recorded one); then real runs: rltrainer's own output read back, mixed input for DQN, remote
runners, S3 (moto), bad input, and BC and MARWIL cloning a PPO expert to a return of 475.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.marwil import BC, MARWIL, BCConfig, MARWILConfig
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.errors import ConfigError, InputError
from rltrainer.offline.input_reader import InputReader, RowLayout, resolve_input
from rltrainer.utils.replay_buffers import transitions_from_rollout

ROOT = Path(__file__).resolve().parents[1]


def episode_rows(eps_id: int, length: int, end: str, first: float = 0.0, dim: int = 1) -> dict[str, list]:
    """``length`` rows of one episode with observations first, first + 1, ... (``dim`` times
    that number); ``end``: "terminated", "truncated" or "open" (the episode goes on past these rows)."""
    obs = [first + t for t in range(length)]
    return {
        "eps_id": [eps_id] * length,
        "agent_index": [0] * length,
        "t": list(range(length)),
        "obs": [[o] * dim for o in obs],
        "new_obs": [[o + 1] * dim for o in obs],
        "actions": [t % 2 for t in range(length)],
        "action_logp": [-0.7] * length,
        "rewards": [1.0] * length,
        "terminateds": [False] * (length - 1) + [end == "terminated"],
        "truncateds": [False] * (length - 1) + [end == "truncated"],
    }


def write_parquet(path: Path, *episodes: dict[str, list]) -> Path:
    columns = {name: sum((e[name] for e in episodes), []) for name in episodes[0]}
    dim = len(columns["obs"][0])
    table = pa.table(
        {
            name: pa.array(values, type=pa.list_(pa.float32(), dim)) if name in ("obs", "new_obs") else values
            for name, values in columns.items()
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def layout(action_space=None) -> RowLayout:
    from gymnasium import spaces

    return RowLayout(
        observation_space=spaces.Box(-np.inf, np.inf, (1,)),
        action_space=action_space or spaces.Discrete(2),
        obs_size=1,
        obs_dtype=np.float32,
        convert_actions=None,
        clip_rewards=lambda r: r,
    )


def test_rollouts_hold_each_recorded_transition(tmp_path: Path) -> None:
    # Episode 7's rows are shuffled in the file (the reader orders them by eps_id and t).
    shuffled = episode_rows(7, 4, "terminated", first=10)
    order = [2, 0, 3, 1]
    shuffled = {name: [values[i] for i in order] for name, values in shuffled.items()}
    path = write_parquet(
        tmp_path / "a.parquet",
        episode_rows(3, 3, "truncated"),
        shuffled,
        episode_rows(9, 5, "open", first=100),
    )
    reader = InputReader((str(path),), layout())
    first = reader.next(5)  # episode 3 (3 rows), then 2 rows of episode 7: cut, truncated
    assert first.obs[:, 0, 0].tolist() == [0, 1, 2, 3, 10, 11]  # the reset row holds episode 3's final obs
    assert first.valid[:, 0].tolist() == [True, True, True, False, True, True]
    assert first.truncateds[:, 0].tolist() == [False, False, True, False, False, True]
    assert first.last_obs[0, 0] == 12
    second = reader.next(7)  # the rest of episode 7 (terminated), then all of episode 9
    assert second.obs[:, 0, 0].tolist() == [12, 13, 14, 100, 101, 102, 103, 104]
    assert second.terminateds[:, 0].tolist() == [False, True, False, False, False, False, False, False]
    assert second.truncateds[:, 0].tolist()[-1]  # episode 9 goes on past the file: it bootstraps
    assert second.last_obs[0, 0] == 105
    for rollout in (first, second):
        transitions = transitions_from_rollout(rollout, n_step=1, gamma=0.9)
        np.testing.assert_array_equal(transitions.next_obs, transitions.obs + 1)  # the recorded new_obs
    third = reader.next(3)  # the next pass over the file begins
    assert third.obs[:3, 0, 0].tolist() == [0, 1, 2]
    assert reader.rows_read == 15


def test_shuffled_reading_keeps_episodes_whole(tmp_path: Path) -> None:
    files = [
        write_parquet(
            tmp_path / f"{i}.parquet",
            *(episode_rows(10 * i + j, 5, "terminated", 100 * (10 * i + j)) for j in range(4)),
        )
        for i in range(3)
    ]
    reader = InputReader(tuple(map(str, files)), layout(), shuffle_buffer_size=20, seed=0)
    rollout = reader.next(240)  # four passes' worth (the buffer is topped up from the next pass)
    obs = rollout.obs[rollout.valid][:, 0]
    pieces = obs.reshape(48, 5)
    assert (np.diff(pieces, axis=1) == 1).all() and (pieces[:, 0] % 100 == 0).all()  # whole episodes
    starts = pieces[:, 0].tolist()
    assert set(starts) == {100.0 * e for e in range(30) if e % 10 < 4}  # every episode is read
    assert starts[:12] != sorted(starts[:12])  # drawn at random, not in file order


def tiny(config_class=PPOConfig, **offline) -> PPOConfig:
    config = (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size=64, model={"fcnet_hiddens": [8]})
        .debugging(seed=0)
    )
    if config_class is PPOConfig:
        config.training(minibatch_size=64, num_epochs=1)
    return config.offline_data(**offline)


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_what_rltrainer_wrote_is_read_back(tmp_path: Path, fmt: str) -> None:
    writer = tiny(output=str(tmp_path / "data"), output_config={"format": fmt})
    writer = writer.reporting(storage_path=str(tmp_path)).build()
    writer.train()
    writer.stop()
    algo = tiny(BCConfig, input_=str(tmp_path / "data")).reporting(storage_path=str(tmp_path)).build()
    reader = algo.env_runner_group.local_worker().offline_input.readers[0]
    result = algo.train()
    assert result["num_env_steps_sampled"] == 64 and reader.rows_read == 64
    assert np.isfinite(result["info"]["learner"]["default_policy"]["learner_stats"]["policy_loss"])
    algo.stop()


def test_mixed_input_feeds_dqn_replay_from_both_sources(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "d.parquet", *(episode_rows(e, 20, "terminated") for e in range(5)))
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .training(num_steps_sampled_before_learning_starts=0, model={"fcnet_hiddens": [8]})
        .offline_data(input_={"sampler": 0.5, str(path): 0.5})
        .debugging(seed=0)
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=200)
    )
    # 4-dim observations from a 1-dim file: the reader says which column and file do not fit.
    algo = config.build()
    with pytest.raises(
        InputError, match=r"d\.parquet: column 'obs' holds \(1,\) values per row.*flatten to 4"
    ):
        algo.train()
    algo.stop()

    obs = np.arange(400, dtype=np.float32).reshape(100, 4)
    table = pa.table(
        {
            "obs": pa.array(list(obs), type=pa.list_(pa.float32(), 4)),
            "new_obs": pa.array(list(obs + 1), type=pa.list_(pa.float32(), 4)),
            "actions": [0, 1] * 50,
            "rewards": [1.0] * 100,
            "dones": [False] * 99 + [True],  # RLlib's older name for terminateds
        }
    )
    pq.write_table(table, path)
    algo = config.build()
    result = algo.train()
    reader = algo.env_runner_group.local_worker().offline_input.readers[1]
    assert 0 < reader.rows_read < result["timesteps_total"]  # some fragments recorded, some sampled
    assert result["episodes_total"] > 0 and len(algo.replay_buffer) == result["timesteps_total"]
    algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_remote_runners_read_their_own_share(tmp_path: Path) -> None:
    import ray

    for i in range(2):
        write_parquet(
            tmp_path / "data" / f"{i}.parquet", episode_rows(i, 8, "terminated", first=100 * i, dim=4)
        )
    config = tiny(BCConfig, input_=str(tmp_path / "data")).env_runners(
        num_env_runners=2, rollout_fragment_length=4
    )
    algo = config.reporting(storage_path=str(tmp_path)).build()
    # Each runner begins at its own file (runner i at file i modulo the number of files).
    firsts = [
        ray.get(runner.sample.remote())[0].obs[0, 0, 0] for runner in algo.env_runner_group.remote_workers
    ]
    assert firsts == [100.0, 0.0]
    result = algo.train()
    assert result["num_env_steps_sampled"] == 64
    algo.stop()


def test_s3_input(tmp_path: Path, s3_bucket) -> None:
    endpoint, client = s3_bucket
    local = write_parquet(tmp_path / "e.parquet", *(episode_rows(e, 16, "terminated") for e in range(4)))
    client.upload_file(str(local), "trajectories", "recorded/run-1/e.parquet")
    client.put_object(Bucket="trajectories", Key="recorded/run-1/.incomplete.parquet", Body=b"junk")
    options = {"endpoint_url": endpoint, "max_attempts": 2, "retry_delay_s": 0.01}
    (source,) = resolve_input("s3://trajectories/recorded", {}, options)
    assert source.files == ("s3://trajectories/recorded/run-1/e.parquet",)  # hidden objects skipped
    (globbed,) = resolve_input("s3://trajectories/recorded/*/e.parquet", {}, options)
    assert globbed.files == source.files
    reader = InputReader(source.files, layout(), storage_options=options)
    assert reader.next(64).valid.sum() == 64
    with pytest.raises(InputError, match=r"input_ 's3://trajectories/nothing' matches no files"):
        resolve_input("s3://trajectories/nothing", {}, options)


def test_box_actions_in_env_units_are_normalized(tmp_path: Path) -> None:
    rows = episode_rows(1, 4, "terminated", dim=3)
    rows["actions"] = [[-2.0], [0.0], [1.0], [2.0]]  # Pendulum's torque, in the env's units
    path = write_parquet(tmp_path / "p.parquet", rows)
    for normalized, expected in ((False, [-1.0, 0.0, 0.5, 1.0]), (True, [-2.0, 0.0, 1.0, 2.0])):
        config = tiny(BCConfig, input_=str(path), actions_in_input_normalized=normalized)
        algo = config.environment("Pendulum-v1").env_runners(
            num_envs_per_env_runner=1, rollout_fragment_length=4
        )
        algo = algo.reporting(storage_path=str(tmp_path)).build()
        rollout, _ = algo.env_runner_group.local_worker().sample()
        assert rollout.actions[:, 0, 0].tolist() == expected
        algo.stop()


def write_bad(path: Path, content: bytes | str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda d: write_bad(d / "x.parquet", b"PAR1 this is not parquet"),
            r"x\.parquet: not a readable Parquet file",
        ),
        (
            lambda d: write_bad(d / "x.jsonl", '{"obs": [1, 2, 3, 4]}\n{"obs": [1, 2\n'),
            r"x\.jsonl line 2: not valid JSON",
        ),
        (
            lambda d: write_bad(d / "x.jsonl", json.dumps({"obs": [0.0] * 4, "rewards": 1.0}) + "\n"),
            r"x\.jsonl: no column\(s\) \['new_obs', 'actions', 'terminateds'\]",
        ),
        (
            lambda d: write_bad(
                d / "x.jsonl",
                json.dumps(
                    {
                        "obs": [0.0] * 4,
                        "new_obs": [0.0] * 4,
                        "actions": 5,
                        "rewards": 1.0,
                        "terminateds": True,
                    }
                ),
            ),
            r"x\.jsonl: column 'actions' holds 5\.\.5, but the policy's actions of Discrete\(2\) are 0\.\.1",
        ),
        (
            lambda d: write_bad(
                d / "x.jsonl",
                json.dumps(
                    {
                        "obs": [float("nan")] * 4,
                        "new_obs": [0.0] * 4,
                        "actions": 1,
                        "rewards": 1.0,
                        "terminateds": True,
                    }
                ),
            ),
            r"x\.jsonl: column 'obs' holds NaN or infinity",
        ),
    ],
)
def test_unreadable_files_are_named_at_the_first_read(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path / "data")
    algo = tiny(BCConfig, input_=path).reporting(storage_path=str(tmp_path)).build()
    with pytest.raises(InputError, match=message):
        algo.train()
    algo.stop()


@pytest.mark.parametrize(
    ("offline", "message", "error"),
    [
        (
            {"input_": "{tmp}/missing"},
            r"input_ '.*/missing' matches no files ending in \.parquet",
            InputError,
        ),
        ({"input_": "{tmp}/empty"}, r"input_ '.*/empty' matches no files", InputError),
        (
            {"input_": {"sampler": 0.5, "x": 0.2}},
            r"probabilities of the sources must add up to 1, they add up to 0\.7",
            ConfigError,
        ),
        ({"input_": ["sampler", "x"]}, r"'sampler' cannot be one of a list of paths", ConfigError),
        ({"input_": 3}, r"input_ takes 'sampler', a path", ConfigError),
        (
            {"input_config": {"fromat": "json"}},
            r"unknown key\(s\) \['fromat'\]; allowed: format",
            ConfigError,
        ),
        ({"input_config": {"format": "csv"}}, r"unknown format 'csv'; allowed: parquet, json", ConfigError),
        ({"shuffle_buffer_size": -1}, r"invalid value for 'shuffle_buffer_size'", ConfigError),
    ],
)
def test_bad_input_settings_say_what_is_wrong(
    tmp_path: Path, offline: dict, message: str, error: type
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".hidden.parquet").write_text("")
    offline = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in offline.items()}
    with pytest.raises(error, match=message):
        tiny(BCConfig, **offline).reporting(storage_path=str(tmp_path)).build()


def test_what_recorded_rows_cannot_feed(tmp_path: Path) -> None:
    path = str(write_parquet(tmp_path / "a.parquet", episode_rows(1, 4, "terminated")))
    with pytest.raises(ConfigError, match=r"observation_filter='MeanStdFilter' cannot apply.*'NoFilter'"):
        tiny(PPOConfig, input_=path).env_runners(observation_filter="MeanStdFilter").validate()
    with pytest.raises(ConfigError, match=r"does not feed recurrent policies"):
        tiny(PPOConfig, input_=path).training(model={"use_lstm": True}).validate()
    with pytest.raises(ConfigError, match=r"minibatch_size \(128\) must be <= train_batch_size \(64\)"):
        tiny(MARWILConfig, input_=path).training(minibatch_size=128).validate()


# --- BC and MARWIL clone a PPO expert ----------------------------------------------------------
@pytest.fixture(scope="module")
def expert_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """50k steps of bench.offline's PPO expert (trained to a return of 490) acting in CartPole,
    recorded as Parquet (what the docs' recipe records)."""
    from bench.offline import expert_config

    tmp = tmp_path_factory.mktemp("expert")
    algo = expert_config().reporting(storage_path=str(tmp)).build()
    while algo.train()["episode_return_mean"] < 490:
        pass
    checkpoint = algo.save()
    algo.stop()
    recorder = PPO.from_checkpoint(checkpoint, {"output": str(tmp / "data")})
    _, episodes = recorder.env_runner_group.sample(50_000)
    recorder.stop()
    assert np.mean([e.episode_return for e in episodes]) > 450
    return tmp / "data"


@pytest.mark.parametrize("name", ["bc", "marwil"])
def test_bc_and_marwil_clone_the_expert(tmp_path: Path, expert_data: Path, name: str) -> None:
    spec = yaml.safe_load((ROOT / "tuned_examples" / f"{name}_cartpole.yaml").read_text())[f"cartpole-{name}"]
    config_class = {"bc": BCConfig, "marwil": MARWILConfig}[name]
    config = config_class().update_from_dict(
        {**spec["config"], "env": "CartPole-v1", "input": str(expert_data)}
    )
    algo = config.reporting(storage_path=str(tmp_path)).build()
    best = 0.0
    for _ in range(spec["stop"]["training_iteration"]):
        result = algo.train()
        best = max(best, result.get("evaluation", {}).get("episode_return_mean", 0.0))
        if best >= 475:
            break
    assert best >= 475, f"{name}: best evaluation return {best}"
    assert np.isnan(result["episode_return_mean"])  # no env episodes: it only read recorded rows
    checkpoint = algo.save()
    algo.stop()
    restored = (BC if name == "bc" else MARWIL).from_checkpoint(checkpoint)
    assert restored.evaluate()["evaluation"]["episode_return_mean"] >= 400
    if name == "marwil":
        assert restored.learner_group.local_learner.ma_sqd_adv_norm == pytest.approx(
            algo.learner_group.local_learner.ma_sqd_adv_norm.item()
        )
    restored.stop()
