"""Off-policy estimation: IS, WIS, DM and DR estimate a trained policy's return from episodes a
near-uniform policy recorded, checked against that policy's true return in the env."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.errors import ConfigError, InputError
from rltrainer.offline.estimators import WeightedImportanceSampling

ENV = "tests.envs:NameTheSideEnv"
FQE = {"n_iters": 100, "lr": 3e-3, "minibatch_size": 256}


def config(tmp_path: Path) -> PPOConfig:
    return (
        PPOConfig()
        .environment(ENV)
        .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=50)
        .training(
            train_batch_size=200,
            minibatch_size=100,
            num_epochs=4,
            lr=3e-3,
            gamma=1.0,
            model={"fcnet_hiddens": [16]},
        )
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 steps (400 episodes) of an untrained policy: nearly uniform, action_logp ~ log 0.5."""
    tmp = tmp_path_factory.mktemp("ope")
    recorder = config(tmp).offline_data(output=str(tmp / "data")).build()
    recorder.env_runner_group.sample(2000)
    recorder.stop()
    return tmp / "data"


def test_estimates_match_the_true_return(tmp_path: Path, recorded: Path) -> None:
    methods = {
        "is": {"type": "is"},
        "wis": {"type": WeightedImportanceSampling},
        "dm_fqe": {"type": "dm", "q_model_config": FQE},
        "dr_fqe": {"type": "rltrainer.offline.estimators.DoublyRobust", "q_model_config": FQE},
    }
    algo = (
        config(tmp_path)
        .evaluation(
            evaluation_duration=400,
            evaluation_config={"input_": str(recorded), "explore": True},  # the stochastic target policy
            off_policy_estimation_methods=methods,
        )
        .build()
    )
    for _ in range(8):
        algo.train()
    evaluation = algo.evaluate()["evaluation"]
    algo.stop()
    true_return = evaluation["episode_return_mean"]  # 400 episodes of the same policy in the env
    assert 3.2 < true_return < 4.9  # learned something, not everything: a real estimation problem
    estimates = evaluation["off_policy_estimator"]
    for name, estimate in estimates.items():
        assert estimate["v_behavior"] == pytest.approx(2.5, abs=0.2), name  # the recording policy
        assert estimate["v_target"] == pytest.approx(true_return, abs=0.4), (name, estimate)
        assert estimate["v_delta"] == pytest.approx(estimate["v_target"] - estimate["v_behavior"])
    assert estimates["dr_fqe"]["v_target_std"] < estimates["is"]["v_target_std"]  # the model's point


def test_estimates_without_an_env_and_as_stop_keys(tmp_path: Path, recorded: Path) -> None:
    from gymnasium import spaces

    from rltrainer.experiment import resolve_stop

    algo_config = (
        config(tmp_path)
        .environment(
            None, observation_space=spaces.Box(-1.0, 2.0, (3,), np.float32), action_space=spaces.Discrete(2)
        )
        .offline_data(input_=str(recorded))
        .evaluation(
            evaluation_interval=1,
            evaluation_duration=50,
            off_policy_estimation_methods={"is": {"type": "is"}},
        )
    )
    algo = algo_config.build()
    result = algo.train()
    algo.stop()
    estimate = result["evaluation"]["off_policy_estimator"]["is"]
    assert np.isfinite(estimate["v_target"]) and result["evaluation"]["episodes_this_iter"] == 0
    assert resolve_stop({"evaluation/off_policy_estimator/is/v_target": 4.0}, type(algo))


def test_bad_estimator_settings(tmp_path: Path, recorded: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"each estimator needs a 'type': one of 'is' \(ImportanceSampling\)"
    ):
        PPOConfig().evaluation(off_policy_estimation_methods={"x": {"type": "magic"}})
    with pytest.raises(ConfigError, match=r"unknown q_model_config key\(s\) \['iters'\]; allowed: n_iters"):
        PPOConfig().evaluation(
            off_policy_estimation_methods={"x": {"type": "dr", "q_model_config": {"iters": 3}}}
        )
    with pytest.raises(
        ConfigError, match=r"estimate from recorded episodes: set offline_data\(input_=PATH\)"
    ):
        config(tmp_path).evaluation(off_policy_estimation_methods={"x": {"type": "is"}}).validate()
    import pyarrow.parquet as pq

    table = pq.read_table(recorded).drop(["action_logp"])
    pq.write_table(table, tmp_path / "no_logp.parquet")
    algo = (
        config(tmp_path)
        .evaluation(
            evaluation_config={"input_": str(tmp_path / "no_logp.parquet")},
            off_policy_estimation_methods={"x": {"type": "is"}},
        )
        .build()
    )
    with pytest.raises(
        InputError, match=r"no_logp\.parquet: off-policy estimation needs the column 'action_logp'"
    ):
        algo.evaluate()
    algo.stop()
