"""``AlgorithmConfig`` / ``PPOConfig``: builder methods, validation, dict round trip, build."""

from __future__ import annotations

import json
import logging

import gymnasium as gym
import numpy as np
import pytest

from rltrainer.algorithms.algorithm_config import AlgorithmConfig, ModelConfig
from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.config_sections.callbacks import FUNCTION_FIELDS
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.policy import PolicySpec
from tests import envs


# A valid, non-default value for every key a builder method accepts.
class NoOpCallbacks(DefaultCallbacks):
    pass


def _observation_fn(agent_obs, worker, base_env, policies, episode):  # noqa: ARG001
    return agent_obs


VALID_VALUES = {
    "env": "CartPole-v1",
    "env_config": {"length": 5},
    "observation_space": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "action_space": gym.spaces.Discrete(3),
    "clip_rewards": 1.5,
    "normalize_actions": False,
    "clip_actions": True,
    "disable_env_checking": True,
    "env_task_fn": "tests.envs:level_by_timesteps",
    "callbacks_class": NoOpCallbacks,
    **{field: [print] for field in FUNCTION_FIELDS},
    "policies": {"p0": PolicySpec(), "p1": PolicySpec(config={"lr": 1e-3})},
    "policy_mapping_fn": "rltrainer.env.multi_agent_examples:policy_per_agent",
    "policies_to_train": ["p0"],
    "count_steps_by": "agent_steps",
    "fake_gpus": True,
    "render_env": True,
    "record_env": "videos",
    "framework_str": "torch",
    "torch_compile_learner": True,
    "torch_compile_learner_what_to_compile": "complete_update",
    "torch_compile_learner_dynamo_backend": "aot_eager",
    "torch_compile_learner_dynamo_mode": "max-autotune",
    "torch_compile_worker": True,
    "torch_compile_worker_dynamo_backend": "aot_eager",
    "torch_compile_worker_dynamo_mode": "reduce-overhead",
    "compress_observations": True,
    "extra_python_environs_for_driver": {"RLTRAINER_TEST_DRIVER": "1"},
    "extra_python_environs_for_worker": {"RLTRAINER_TEST_WORKER": "2"},
    "policy_states_are_swappable": True,
    "observation_fn": "tests.test_config:_observation_fn",
    "keep_per_episode_custom_metrics": True,
    "num_env_runners": 2,
    "num_envs_per_env_runner": 4,
    "rollout_fragment_length": 16,
    "batch_mode": "complete_episodes",
    "observation_filter": "MeanStdFilter",
    "sample_timeout_s": 5.0,
    "horizon": 200,
    "remote_worker_envs": True,
    "gamma": 0.9,
    "lr": 1e-3,
    "grad_clip": 0.5,
    "grad_clip_by": "norm",
    "train_batch_size": 512,
    "train_batch_size_per_learner": 128,
    "model": {"fcnet_hiddens": [8, 8], "fcnet_activation": "relu", "vf_share_layers": True},
    "lambda_": 0.9,
    "clip_param": 0.1,
    "vf_clip_param": 5.0,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.01,
    "kl_coeff": 0.0,
    "kl_target": 0.02,
    "num_epochs": 2,
    "minibatch_size": 32,
    "use_gae": False,
    "evaluation_interval": 2,
    "evaluation_duration": 3,
    "evaluation_duration_unit": "timesteps",
    "evaluation_config": {"explore": False},
    "evaluation_sample_timeout_s": 30.0,
    "evaluation_parallel_to_training": True,
    "evaluation_force_reset_envs_before_iteration": False,
    "evaluation_num_env_runners": 2,
    "custom_evaluation_function": "tests.test_evaluation_options:my_metrics",
    "always_attach_evaluation_results": True,
    "explore": False,
    "exploration_config": {"type": "StochasticSampling", "random_timesteps": 10},
    "store_buffer_in_checkpoints": True,
    "metrics_num_episodes_for_smoothing": 5,
    "min_time_s_per_iteration": 0.5,
    "min_sample_timesteps_per_iteration": 100,
    "storage_path": "/tmp/rltrainer-test-results",
    "storage_options": {"endpoint_url": "http://127.0.0.1:9000", "max_attempts": 2},
    "num_to_keep": 3,
    "checkpoint_score_attribute": "episode_return_mean",
    "checkpoint_score_order": "min",
    "experiment_name": "exp",
    "checkpoint_frequency": 3,
    "checkpoint_at_end": True,
    "log_level": "INFO",
    "on_nonfinite": "skip_batch",
    "seed": 7,
    "logger_config": {"type": ["json", "csv"]},
    "output": "logdir",
    "output_config": {"format": "json"},
    "output_max_file_size": 1024,
    "input_": {"sampler": 0.25, "recorded/": 0.75},
    "off_policy_estimation_methods": {
        "is": {"type": "is"},
        "dr": {"type": "dr", "q_model_config": {"n_iters": 5}},
    },
    "input_config": {"format": "json"},
    "shuffle_buffer_size": 1000,
    "actions_in_input_normalized": True,
    "num_gpus": 0.5,
    "num_cpus_for_main_process": 2,
    "num_cpus_per_env_runner": 0.5,
    "num_gpus_per_env_runner": 0.25,
    "custom_resources_per_env_runner": {"rollout": 1.0},
    "num_learners": 1,
    "num_gpus_per_learner": 0.5,
    "num_cpus_per_learner": 2,
    "custom_resources_per_learner": {"learner": 1.0},
    "placement_strategy": "SPREAD",
    "placement_timeout_s": 5.0,
    "restart_failed_env_runners": False,
    "ignore_env_runner_failures": True,
    "max_num_env_runner_restarts": 3,
    "delay_between_env_runner_restarts_s": 0.5,
    "restart_failed_sub_environments": True,
    "num_consecutive_env_runner_failures_tolerance": 5,
    "env_runner_health_probe_timeout_s": 10.0,
    "env_runner_startup_timeout_s": 120.0,
    "restart_failed_learners": False,
    "max_num_learner_restarts": 2,
    "learner_restart_timeout_s": 30.0,
}

SECTION_KEYS = [(section, key) for section, keys in PPOConfig.SECTIONS.items() for key in keys]


@pytest.fixture(autouse=True)
def _restore_log_level():
    """``debugging(log_level=...)`` sets the rltrainer logger's level; put it back."""
    log = logging.getLogger("rltrainer")
    level = log.level
    yield
    log.setLevel(level)


def tiny_config(tmp_path) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
    )


def test_every_builder_key_has_a_test_value():
    assert {key for _, key in SECTION_KEYS} == set(VALID_VALUES)


@pytest.mark.parametrize(("section", "key"), SECTION_KEYS)
def test_builder_method_sets_its_key(section, key):
    config = PPOConfig()
    value = VALID_VALUES[key]
    assert getattr(config, section)(**{key: value}) is config
    if key == "model":  # the keys given, over the defaults of the others
        assert config.model.model_dump() == {**ModelConfig().model_dump(), **value}
    else:
        assert getattr(config, key) == value


@pytest.mark.parametrize("section", list(PPOConfig.SECTIONS))
def test_builder_method_rejects_unknown_key(section):
    with pytest.raises(ValueError, match=r"unknown key 'bogus_key'.*allowed:") as info:
        getattr(PPOConfig(), section)(bogus_key=1)
    for allowed in PPOConfig.SECTIONS[section]:
        assert allowed in str(info.value)


@pytest.mark.parametrize(
    ("section", "key", "allowed_key"),
    [
        ("training", "num_epoch", "num_epochs"),
        ("env_runners", "num_env_runner", "num_env_runners"),
        ("evaluation", "evaluation_intervall", "evaluation_interval"),
    ],
)
def test_unknown_key_suggests_close_match(section, key, allowed_key):
    with pytest.raises(ValueError, match=f"did you mean '{allowed_key}'"):
        getattr(PPOConfig(), section)(**{key: 1})


def test_key_of_another_section_is_rejected():
    with pytest.raises(ValueError, match="training\\(\\): unknown key 'num_env_runners'"):
        PPOConfig().training(num_env_runners=2)


INVALID_VALUES = [
    ("training", {"lr": "abc"}, r"'lr'.*'abc'"),
    ("training", {"lr": -0.1}, "lr"),
    ("training", {"lr": [[0, 1e-3], [100, -1e-3]]}, "lr"),
    ("training", {"gamma": 2}, r"'gamma'.*less than or equal to 1"),
    ("training", {"gamma": -0.5}, "gamma"),
    ("training", {"lambda_": 1.5}, "lambda_"),
    ("training", {"train_batch_size": 0}, "train_batch_size"),
    ("training", {"train_batch_size": 1.5}, "train_batch_size"),
    ("training", {"num_epochs": 0}, "num_epochs"),
    ("training", {"clip_param": 0}, "clip_param"),
    ("training", {"grad_clip": -1.0}, "grad_clip"),
    ("training", {"grad_clip_by": "x"}, r"'grad_clip_by'.*'value', 'norm' or 'global_norm'"),
    ("env_runners", {"batch_mode": "x"}, r"'batch_mode'.*'truncate_episodes' or 'complete_episodes'"),
    ("env_runners", {"observation_filter": "x"}, r"'observation_filter'.*'MeanStdFilter'"),
    ("env_runners", {"rollout_fragment_length": 0}, "rollout_fragment_length"),
    ("env_runners", {"rollout_fragment_length": "x"}, "rollout_fragment_length"),
    ("env_runners", {"num_envs_per_env_runner": 0}, "num_envs_per_env_runner"),
    ("env_runners", {"num_env_runners": -1}, "num_env_runners"),
    ("training", {"model": {"bad": 1}}, r"'bad'.*allowed keys: fcnet_hiddens"),
    ("training", {"model": "x"}, "'model' must be a dict"),
    ("training", {"model": {"fcnet_hiddens": [0]}}, "fcnet_hiddens"),
    ("training", {"model": {"fcnet_activation": "sigmoid"}}, "fcnet_activation"),
    ("framework", {"framework": "tf"}, r"'torch'.*'tf'"),
    ("environment", {"env": 3}, "env"),
    ("environment", {"env_config": [1]}, "env_config"),
    ("environment", {"observation_space": "Box"}, "observation_space"),
    ("evaluation", {"evaluation_duration_unit": "hours"}, "evaluation_duration_unit"),
    ("exploration", {"explore": "maybe"}, "explore"),
    ("debugging", {"seed": "a"}, "seed"),
    ("debugging", {"log_level": "LOUD"}, "log_level"),
    ("debugging", {"logger_config": {"type": "xml"}}, r"logger_config.*'xml'.*allowed: json, csv"),
    ("offline_data", {"output_config": {"format": "csv"}}, r"unknown format 'csv'; allowed: parquet, json"),
    ("offline_data", {"output_config": {"codec": "zstd"}}, r"unknown key\(s\) \['codec'\]; allowed: format"),
    ("offline_data", {"output_max_file_size": 0}, "output_max_file_size"),
    ("resources", {"placement_strategy": "RANDOM"}, "placement_strategy"),
]


@pytest.mark.parametrize(
    ("section", "kwargs", "match"),
    INVALID_VALUES,
    ids=[f"{section}-{key}={value!r}" for section, kw, _ in INVALID_VALUES for key, value in kw.items()],
)
def test_invalid_value_raises_value_error(section, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(PPOConfig(), section)(**kwargs)


def test_update_from_dict_rejects_unknown_key():
    with pytest.raises(ValueError, match=r"unknown key 'bogus'.*allowed:.*num_env_runners"):
        PPOConfig().update_from_dict({"bogus": 1})


def test_update_from_dict_rejects_non_dict():
    with pytest.raises(ValueError, match="must be a dict"):
        PPOConfig().update_from_dict(["env", "CartPole-v1"])


def test_invalid_value_leaves_config_unchanged():
    config = PPOConfig().training(gamma=0.9)
    with pytest.raises(ValueError):
        config.training(gamma=2)
    assert config.gamma == 0.9


def test_framework_torch_accepted():
    assert PPOConfig().framework("torch").framework_str == "torch"


def test_model_update_merges_keys():
    config = PPOConfig().training(model={"fcnet_hiddens": [32]})
    config.training(model={"fcnet_activation": "relu"})
    assert config.model.fcnet_hiddens == [32]
    assert config.model.fcnet_activation == "relu"


def test_log_level_sets_rltrainer_logger():
    PPOConfig().debugging(log_level="INFO")
    assert logging.getLogger("rltrainer").level == logging.INFO
    PPOConfig().debugging(log_level="WARN")
    assert logging.getLogger("rltrainer").level == logging.WARNING


def configured() -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1", env_config={"sutton_barto_reward": False}, clip_rewards=2.0)
        .env_runners(
            num_envs_per_env_runner=2, rollout_fragment_length=16, observation_filter="MeanStdFilter"
        )
        .training(
            gamma=0.95,
            lambda_=0.9,
            lr=[[0, 1e-3], [1000, 1e-4]],
            num_epochs=3,
            minibatch_size=16,
            train_batch_size=64,
            model={"fcnet_hiddens": [16, 16]},
            grad_clip=1.0,
        )
        .evaluation(evaluation_interval=2, evaluation_config={"explore": False})
        .reporting(metrics_num_episodes_for_smoothing=7, experiment_name="roundtrip")
        .debugging(seed=3)
    )


def test_to_dict_is_flat_json_with_rllib_keys():
    data = configured().to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["lambda"] == 0.9
    assert "lambda_" not in data
    assert data["framework"] == "torch"
    assert data["lr"] == [[0, 1e-3], [1000, 1e-4]]
    assert data["model"] == {**ModelConfig().model_dump(), "fcnet_hiddens": [16, 16]}
    assert data["model"]["conv_filters"] is None and data["model"]["custom_model"] is None
    assert data["evaluation_config"] == {"explore": False}


def test_to_dict_from_dict_round_trip():
    original = configured()
    data = original.to_dict()
    restored = PPOConfig.from_dict(data)
    assert isinstance(restored, PPOConfig)
    assert restored.to_dict() == data
    assert restored.lambda_ == 0.9
    assert restored.lr == original.lr
    assert restored.algo_class is PPO


def test_round_trip_through_json_text():
    data = json.loads(json.dumps(configured().to_dict()))
    assert PPOConfig.from_dict(data).to_dict() == configured().to_dict()


def test_round_trip_with_spaces_and_env_class():
    config = PPOConfig().environment(
        envs.BoxObsEnv,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
        action_space=gym.spaces.Discrete(2),
    )
    data = config.to_dict()
    assert data["env"] == "tests.envs:BoxObsEnv"
    restored = PPOConfig.from_dict(json.loads(json.dumps(data)))
    assert restored.observation_space == config.observation_space
    assert restored.action_space == config.action_space
    assert restored.to_dict() == data


def test_from_dict_accepts_rllib_aliases():
    config = PPOConfig.from_dict(
        {
            "env": "CartPole-v1",
            "num_workers": 0,
            "num_envs_per_worker": 3,
            "num_sgd_iter": 4,
            "sgd_minibatch_size": 32,
            "lambda": 0.7,
            "framework": "torch",
        }
    )
    assert config.num_env_runners == 0
    assert config.num_envs_per_env_runner == 3
    assert config.num_epochs == 4
    assert config.minibatch_size == 32
    assert config.lambda_ == 0.7


def test_from_dict_rejects_invalid_values_with_key_name():
    with pytest.raises(ValueError, match="num_epochs"):
        PPOConfig.from_dict({"num_sgd_iter": 0})


def test_lr_schedule_accepted_as_lists_and_tuples():
    assert PPOConfig().training(lr=[[0, 1e-3], [100, 0.0]]).lr == [(0, 1e-3), (100, 0.0)]
    assert PPOConfig().training(lr=[(0, 1e-3)]).lr == [(0, 1e-3)]


def test_copy_is_independent():
    original = configured()
    clone = original.copy()
    assert clone.to_dict() == original.to_dict()
    clone.training(gamma=0.5, model={"fcnet_hiddens": [4]})
    clone.env_config["sutton_barto_reward"] = True
    clone.evaluation_config["explore"] = True
    assert original.gamma == 0.95
    assert original.model.fcnet_hiddens == [16, 16]
    assert original.env_config == {"sutton_barto_reward": False}
    assert original.evaluation_config == {"explore": False}
    assert clone.algo_class is PPO


def test_copy_frozen_argument_accepted():
    assert PPOConfig().copy(copy_frozen=False).gamma == PPOConfig().gamma


def test_validate_requires_env():
    with pytest.raises(ValueError, match=r"no env set.*environment\("):
        PPOConfig().validate()


def test_validate_minibatch_larger_than_train_batch():
    config = PPOConfig().environment("CartPole-v1").training(train_batch_size=64, minibatch_size=128)
    with pytest.raises(ValueError, match=r"minibatch_size \(128\) must be <= train_batch_size \(64\)"):
        config.validate()


@pytest.mark.parametrize(
    "schedule",
    [[], [[100, 1e-3], [0, 1e-4]], [[-10, 1e-3], [0, 1e-4]]],
    ids=["empty", "decreasing-timesteps", "negative-timestep"],
)
def test_validate_bad_lr_schedule(schedule):
    config = PPOConfig().environment("CartPole-v1").training(lr=schedule)
    with pytest.raises(ValueError, match="lr schedule"):
        config.validate()


def test_validate_unknown_evaluation_config_key():
    config = PPOConfig().environment("CartPole-v1").evaluation(evaluation_config={"explor": False})
    with pytest.raises(ValueError, match=r"evaluation_config has unknown key\(s\) \['explor'\].*explore"):
        config.validate()


def test_validate_accepts_aliases_in_evaluation_config():
    PPOConfig().environment("CartPole-v1").evaluation(evaluation_config={"num_envs_per_worker": 2}).validate()


def test_validate_passes_for_good_config():
    configured().validate()


def test_get_evaluation_config_applies_overrides():
    config = configured()
    evaluation = config.get_evaluation_config()
    assert evaluation.explore is False
    assert config.explore is True


@pytest.mark.parametrize(
    ("train_batch_size", "num_env_runners", "num_envs", "expected"),
    [(256, 0, 1, 256), (256, 0, 4, 64), (256, 2, 4, 32), (100, 0, 3, 34), (2, 0, 8, 1)],
)
def test_rollout_fragment_length_auto(train_batch_size, num_env_runners, num_envs, expected):
    config = (
        PPOConfig()
        .training(train_batch_size=train_batch_size, minibatch_size=1)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=num_envs)
    )
    assert config.rollout_fragment_length == "auto"
    assert config.get_rollout_fragment_length() == expected


def test_rollout_fragment_length_explicit():
    config = PPOConfig().env_runners(rollout_fragment_length=50, num_envs_per_env_runner=4)
    assert config.get_rollout_fragment_length() == 50


def test_build_returns_ppo(tmp_path):
    config = tiny_config(tmp_path)
    algo = config.build()
    try:
        assert isinstance(algo, PPO)
        assert algo.config is not config
        config.training(gamma=0.5)
        assert algo.config.gamma == 0.99
    finally:
        algo.stop()


def test_build_with_env_argument(tmp_path):
    config = tiny_config(tmp_path)
    config.env = None
    algo = config.build("CartPole-v1")
    try:
        assert algo.config.env == "CartPole-v1"
    finally:
        algo.stop()


def test_build_without_env_fails(tmp_path):
    config = tiny_config(tmp_path)
    config.env = None
    with pytest.raises(ValueError, match="no env set"):
        config.build()


def test_build_from_base_config_fails():
    with pytest.raises(ValueError, match="no algorithm"):
        AlgorithmConfig().environment("CartPole-v1").build()


def test_algorithm_accepts_a_dict_config(tmp_path):
    algo = PPO(config=tiny_config(tmp_path).to_dict())
    try:
        assert isinstance(algo.config, PPOConfig)
        assert algo.config.train_batch_size == 64
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("CartPole-v1", "CartPole-v1"),
        ("ALE/Pong-v5", "ALE-Pong-v5"),
        ("tests.envs:DictObsEnv", "DictObsEnv"),
        (envs.TupleObsEnv, "TupleObsEnv"),
    ],
)
def test_env_name_is_folder_safe(env, expected):
    assert PPOConfig().environment(env).env_name == expected


@pytest.mark.parametrize("algo", ["PPO", "DQN", "SAC", "APPO", "MARWIL"])
def test_field_docs_are_what_pydantic_reads_from_the_source(algo):
    """``field_doc`` (read when a message needs it, not at import) gives every field's
    docstring as pydantic's ``use_attribute_docstrings`` would."""
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls

    from rltrainer.algorithms.config_sections.section import field_doc
    from rltrainer.algorithms.registry import get_algorithm_class

    config_class = get_algorithm_class(algo).config_class
    for name in config_class.model_fields:
        # The class that declares the field last (a subclass may declare it again) documents it.
        owner = next(
            base for base in config_class.__mro__ if name in base.__dict__.get("__annotations__", {})
        )
        expected = extract_docstrings_from_cls(owner, use_inspect=True).get(name, "")
        assert field_doc(config_class, name) == expected, name
    assert field_doc(config_class, "gamma") == "Discount factor."


def test_train_batch_size_per_learner_sets_the_total_for_the_learners():
    """RLlib's new-stack batch size: per learner, whichever order the builders are called in."""
    config = PPOConfig().training(train_batch_size_per_learner=512).learners(num_learners=2)
    assert config.train_batch_size == 1024
    config.learners(num_learners=0)
    assert config.train_batch_size == 512  # the driver's one learner
    restored = PPOConfig.from_dict(config.to_dict())
    assert restored.train_batch_size == 512 and restored.train_batch_size_per_learner == 512
    config.training(train_batch_size=300)  # set later: the total is what it says
    assert config.train_batch_size == 300 and config.train_batch_size_per_learner is None
    with pytest.raises(ValueError, match="train_batch_size_per_learner"):
        PPOConfig().training(train_batch_size_per_learner=0)


def test_env_runners_takes_rllibs_current_keys():
    config = PPOConfig().env_runners(explore=False, num_cpus_per_env_runner=2, num_gpus_per_env_runner=0)
    assert config.explore is False and config.num_cpus_per_env_runner == 2


def test_overrides_gives_the_checked_settings_as_a_dict():
    from rltrainer.algorithms.algorithm_config import AlgorithmConfig

    assert AlgorithmConfig.overrides(explore=False) == {"explore": False}
    assert PPOConfig.overrides(clip_param=0.1, explore=False) == {"clip_param": 0.1, "explore": False}
    with pytest.raises(ValueError, match=r"unknown key 'explor' \(did you mean 'explore'\?\)"):
        PPOConfig.overrides(explor=False)
    config = PPOConfig().evaluation(evaluation_config=PPOConfig.overrides(explore=False))
    assert config.evaluation_config == {"explore": False}
