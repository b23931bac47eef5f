"""``.offline_data(output=...)``: every sampled batch written as Parquet or JSON-lines rows.

The episode bookkeeping is checked on a hand-made rollout; then real runs write from the
driver's runner, from remote runners, to ``logdir``, to S3 (moto), and after a resume.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.env_runner import EnvRunner, Rollout
from rltrainer.errors import ConfigError
from rltrainer.offline import output_writer
from rltrainer.offline.output_writer import COLUMNS, OutputWriter


def rollout(first_obs: int, valid: list[list[int]], terminated: list[list[int]], truncated=None) -> Rollout:
    """``[T=len(valid), N]`` steps; observation ``first_obs + 10 * t + n`` (1-dim) at step t of env n."""
    valid_ = np.array(valid, dtype=bool)
    steps, envs = valid_.shape
    obs = (first_obs + 10 * np.arange(steps)[:, None] + np.arange(envs)[None]).astype(np.float32)[..., None]
    return Rollout(
        obs=obs,
        actions=np.ones((steps, envs), dtype=np.int64),
        action_logp=np.full((steps, envs), -0.5, dtype=np.float32),
        rewards=np.ones((steps, envs), dtype=np.float32),
        terminateds=np.array(terminated, dtype=bool),
        truncateds=np.zeros_like(valid_) if truncated is None else np.array(truncated, dtype=bool),
        valid=valid_,
        last_obs=(first_obs + 10 * steps + np.arange(envs)).astype(np.float32)[:, None],
    )


def test_episode_ids_and_steps_continue_across_fragments() -> None:
    writer = OutputWriter(None, num_envs=2)
    # Env 0 ends an episode at step 1 (step 2 is its autoreset step); env 1 is truncated at step 3.
    first = writer.rows(
        rollout(
            0,
            valid=[[1, 1], [1, 1], [0, 1], [1, 1]],
            terminated=[[0, 0], [1, 0], [0, 0], [0, 0]],
            truncated=[[0, 0], [0, 0], [0, 0], [0, 1]],
        )
    )
    second = writer.rows(
        rollout(100, valid=[[1, 0], [1, 1], [0, 1], [1, 1]], terminated=[[0, 0], [1, 0], [0, 0], [0, 0]])
    )
    assert list(first) == list(COLUMNS)
    a, b, c = first["eps_id"][0], first["eps_id"][2], first["eps_id"][3]
    assert first["eps_id"].tolist() == [a, a, b, c, c, c, c]  # env by env, reset step left out
    assert first["t"].tolist() == [0, 1, 0, 0, 1, 2, 3]
    assert first["obs"][:, 0].tolist() == [0, 10, 30, 1, 11, 21, 31]
    assert first["new_obs"][:, 0].tolist() == [10, 20, 40, 11, 21, 31, 41]  # last: the rollout's last_obs
    assert first["terminateds"].tolist() == [False, True, False, False, False, False, False]
    assert first["truncateds"].tolist() == [False] * 6 + [True]
    d, e = second["eps_id"][2], second["eps_id"][3]
    assert second["eps_id"].tolist() == [b, b, d, e, e, e]  # env 0's episode b spans both fragments
    assert second["t"].tolist() == [1, 2, 0, 0, 1, 2]
    assert len({a, b, c, d, e}) == 5
    assert set(second["agent_index"].tolist()) == {0}

    writer.new_episodes()  # the envs were reset: no episode goes on
    third = writer.rows(rollout(200, valid=[[1, 1]], terminated=[[0, 0]]))
    assert third["t"].tolist() == [0, 0]
    assert not {d, e} & set(third["eps_id"].tolist())


def tiny(output: str | None, storage_path: Path, **offline) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(storage_path))
        .offline_data(output=output, **offline)
        .debugging(seed=0)
    )


def check_episodes(rows) -> None:
    """Every episode's steps are t = 0, 1, ... in order, and each step's new_obs is the next obs."""
    for _, episode in rows.groupby("eps_id", sort=False):
        assert episode.t.tolist() == list(range(len(episode)))
        obs, new_obs = np.stack(episode.obs), np.stack(episode.new_obs)
        np.testing.assert_array_equal(new_obs[:-1], obs[1:])
        assert not (episode.terminateds | episode.truncateds).iloc[:-1].any()


def test_parquet_files_roll_over_and_hold_every_sampled_step(tmp_path: Path) -> None:
    algo = tiny(str(tmp_path / "out"), tmp_path, output_max_file_size=4000).build()
    for _ in range(4):
        result = algo.train()
    algo.stop()
    files = sorted((tmp_path / "out").iterdir())
    assert len(files) >= 2 and all(f.suffix == ".parquet" and "_worker-0_" in f.name for f in files)
    table = pq.read_table(tmp_path / "out")  # hidden in-progress files would be skipped; none are left
    assert table.column_names == list(COLUMNS)
    assert table.num_rows == result["timesteps_total"] >= 256
    rows = table.to_pandas()
    check_episodes(rows)
    ended = rows[rows.terminateds | rows.truncateds]
    assert len(ended) == result["episodes_total"]
    assert rows.obs.iloc[0].dtype == np.float32 and rows.actions.dtype == np.int64


def test_one_step_fragments_share_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fragments are buffered into row groups of ``ROW_GROUP_BYTES`` (SAC samples one step at a
    time: a row group each cost ~1.7 KB of metadata per row)."""
    writer = OutputWriter(str(tmp_path), num_envs=1)
    for step in range(300):
        writer.write(rollout(step, valid=[[1]], terminated=[[step % 100 == 99]]))
    monkeypatch.setattr(output_writer, "ROW_GROUP_BYTES", 2000)  # the next file: 44-row groups
    writer.set_path(str(tmp_path / "small_groups"))
    for step in range(300):
        writer.write(rollout(step, valid=[[1]], terminated=[[False]]))
    writer.close()
    (one,) = tmp_path.glob("*.parquet")
    (several,) = (tmp_path / "small_groups").glob("*.parquet")
    assert pq.ParquetFile(one).metadata.num_row_groups == 1 and pq.read_table(one).num_rows == 300
    assert one.stat().st_size < 10_000  # a row group per step: ~500 KB
    metadata = pq.ParquetFile(several).metadata
    groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert groups == [44] * 6 + [36], groups  # each full group holds >= 2,000 bytes of rows
    assert pq.read_table(several).column("t").to_pylist() == list(range(300))  # in order


def test_json_lines_to_logdir(tmp_path: Path) -> None:
    algo = tiny("logdir", tmp_path, output_config={"format": "json"}).build()
    result = algo.train()
    algo.stop()
    (file,) = (algo.trial_dir / "output").iterdir()
    assert file.suffix == ".jsonl"
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert len(lines) == result["timesteps_total"] and list(lines[0]) == list(COLUMNS)
    assert len(lines[0]["obs"]) == 4 and isinstance(lines[0]["terminateds"], bool)


def test_no_output_no_writer(tmp_path: Path) -> None:
    runner = EnvRunner(tiny(None, tmp_path))
    assert runner.output_writer is None
    runner.stop()


def test_resumed_trial_gets_the_output(tmp_path: Path) -> None:
    first = tiny("logdir", tmp_path).build()
    first.train()
    checkpoint = first.save()
    first.stop()
    second = tiny("logdir", tmp_path).build()
    second.resume_from(checkpoint)
    result = second.train()
    second.stop()
    files = list((first.trial_dir / "output").iterdir())
    assert len(files) == 2  # one per run, both in the first run's trial folder
    assert pq.read_table(first.trial_dir / "output").num_rows == result["timesteps_total"]


@pytest.mark.parametrize(
    ("offline", "message"),
    [
        ({"output_config": {"format": "xml"}}, r"unknown format 'xml'; allowed: parquet, json"),
        ({"output_config": {"format": "json", "compression": "zstd"}}, r"not available for json"),
        ({"output": ""}, r"invalid value for 'output'.*not empty"),
    ],
)
def test_bad_output_settings_say_what_is_allowed(offline: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PPOConfig().offline_data(**offline)


def test_unwritable_output_fails_at_build(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        ConfigError, match=r"output '.*a_file/out' cannot be written.*allowed: None, 'logdir'"
    ):
        tiny(str(tmp_path / "a_file" / "out"), tmp_path).build()


@pytest.mark.usefixtures("local_ray")
def test_remote_runners_write_their_own_files(tmp_path: Path) -> None:
    config = tiny("logdir", tmp_path).env_runners(num_env_runners=2, rollout_fragment_length=16)
    algo = config.build()
    result = algo.train()
    algo.stop()  # each runner finishes its file before it goes
    output = algo.trial_dir / "output"  # the actors got the driver's trial folder
    files = sorted(output.iterdir(), key=lambda f: f.name.split("_worker-")[1])
    assert [f.name.split("_worker-")[1][:2] for f in files] == ["1_", "2_"]
    rows = pq.read_table(output).to_pandas()
    assert len(rows) == result["timesteps_total"]
    check_episodes(rows)
    by_file = [set(pq.read_table(f).column("eps_id").to_pylist()) for f in files]
    assert not by_file[0] & by_file[1]  # episode ids are unique across runners


@pytest.mark.parametrize(
    ("output", "prefix"), [("s3://trajectories/runs/a", "runs/a/"), ("logdir", "runs/b/")]
)
def test_s3_output_is_uploaded_file_by_file(tmp_path: Path, s3_bucket, output: str, prefix: str) -> None:
    endpoint, client = s3_bucket
    config = tiny(output, tmp_path, output_max_file_size=1500)
    config.reporting(storage_options={"endpoint_url": endpoint, "max_attempts": 2, "retry_delay_s": 0.01})
    if output == "logdir":  # the trial folder is on S3: so is its output/
        config.reporting(storage_path="s3://trajectories/runs/b", experiment_name="exp")
    algo = config.build()
    algo.train()
    result = algo.train()
    algo.stop()
    listing = client.list_objects_v2(Bucket="trajectories", Prefix=prefix)["Contents"]
    keys = [o["Key"] for o in listing if o["Key"].endswith(".parquet")]
    assert len(keys) >= 2 and all("/." not in k for k in keys)
    assert all(k.startswith("runs/b/exp/") and "/output/output-" in k for k in keys) == (output == "logdir")
    rows = sum(
        pq.read_table(io.BytesIO(client.get_object(Bucket="trajectories", Key=k)["Body"].read())).num_rows
        for k in keys
    )
    assert rows == result["timesteps_total"]
