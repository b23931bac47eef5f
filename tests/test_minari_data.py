"""Minari datasets: rltrainer's recorded episodes exported to a local Minari dataset (Arrow
storage), read back by Minari itself, and read for training as ``input_="minari:<id>"``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rltrainer.algorithms.marwil import BCConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.errors import InputError
from rltrainer.offline.minari_data import to_minari

minari = pytest.importorskip("minari")


@pytest.fixture
def datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def record(tmp_path: Path, env: str = "CartPole-v1", steps: int = 600) -> Path:
    config = (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=2)
        .offline_data(output=str(tmp_path / "recorded"))
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    algo.env_runner_group.sample(steps)
    algo.stop()
    return tmp_path / "recorded"


def test_export_then_train_from_the_dataset(tmp_path: Path, datasets: Path) -> None:
    recorded = record(tmp_path)
    rows = pq.read_table(recorded).to_pandas()
    complete = rows.groupby("eps_id").filter(
        lambda e: (e.terminateds | e.truncateds).iloc[-1] and e.t.iloc[0] == 0
    )
    dataset = to_minari(
        str(recorded), "cartpole/rltrainer-test-v0", "CartPole-v1", algorithm_name="PPO (untrained)"
    )
    assert (datasets / "cartpole" / "rltrainer-test-v0").is_dir()
    loaded = minari.load_dataset("cartpole/rltrainer-test-v0")
    assert loaded.total_episodes == complete.eps_id.nunique() == dataset.total_episodes > 5
    assert loaded.total_steps == len(complete)
    first = next(iter(loaded.iterate_episodes()))
    episode = complete[complete.eps_id == complete.eps_id.iloc[0]]
    np.testing.assert_allclose(first.observations[:-1], np.stack(episode.obs))
    np.testing.assert_allclose(first.observations[-1], episode.new_obs.iloc[-1])
    assert first.actions.tolist() == episode.actions.tolist()

    config = (
        BCConfig()
        .environment("CartPole-v1")
        .offline_data(input_="minari:cartpole/rltrainer-test-v0", shuffle_buffer_size=100)
        .training(train_batch_size=200)
        .reporting(storage_path=str(tmp_path))
    )
    algo = config.build()
    result = algo.train()
    reader = algo.env_runner_group.local_worker().offline_input.readers[0]
    algo.stop()
    assert result["num_env_steps_sampled"] == 200 == reader.rows_read


@pytest.mark.usefixtures("datasets")
def test_missing_or_mismatched_datasets_say_so(tmp_path: Path) -> None:
    config = BCConfig().environment("CartPole-v1").reporting(storage_path=str(tmp_path))
    with pytest.raises(
        InputError, match=r"Minari dataset 'nope/none-v0' is not on this machine .*nothing is downloaded"
    ):
        config.offline_data(input_="minari:nope/none-v0").build()
    to_minari(str(record(tmp_path)), "cartpole/small-v0", "CartPole-v1")
    pendulum = BCConfig().environment("Pendulum-v1").reporting(storage_path=str(tmp_path))
    with pytest.raises(
        InputError, match=r"holds the observation space Box.*\(4,\).*but this config's is Box.*\(3,\)"
    ):
        pendulum.offline_data(input_="minari:cartpole/small-v0").build()
