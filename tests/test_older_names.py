"""The documents' older names map to the current ones; two algorithms fit side by side."""

from __future__ import annotations

import importlib

import gymnasium as gym
import pytest

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ppo import PPOConfig


def test_rollouts_resources_and_training_accept_the_older_names():
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .rollouts(num_rollout_workers=2, num_envs_per_worker=3, rollout_fragment_length=16)
        .resources(num_cpus_per_worker=0.5, num_gpus_per_worker=0, custom_resources_per_worker={"x": 1})
        .training(sgd_minibatch_size=64, num_sgd_iter=3)
        .fault_tolerance(recreate_failed_workers=False, ignore_worker_failures=True)
    )
    assert (config.num_env_runners, config.num_envs_per_env_runner, config.rollout_fragment_length) == (
        2,
        3,
        16,
    )
    assert (config.num_cpus_per_env_runner, config.num_gpus_per_env_runner) == (0.5, 0)
    assert config.custom_resources_per_env_runner == {"x": 1}
    assert (config.minibatch_size, config.num_epochs) == (64, 3)
    assert (config.restart_failed_env_runners, config.ignore_env_runner_failures) == (False, True)


def test_an_older_name_in_the_wrong_builder_is_still_an_unknown_key():
    with pytest.raises(ValueError, match=r"training\(\): unknown key 'num_rollout_workers'"):
        PPOConfig().training(num_rollout_workers=2)


def test_trainer_era_inference_names(tmp_path):
    config = PPOConfig().environment("CartPole-v1").reporting(storage_path=str(tmp_path)).debugging(seed=0)
    algo = config.build()
    try:
        obs, _ = gym.make("CartPole-v1").reset(seed=0)
        assert algo.compute_action(obs, explore=False) == algo.compute_single_action(obs, explore=False)
        local = algo.workers.local_worker()
        assert local.policy_map["default_policy"] is local.get_policy() is algo.get_policy()
    finally:
        algo.stop()


def test_two_algorithms_with_remote_runners_side_by_side(tmp_path):
    """Train one, restore a second from its checkpoint while the first is alive (the docs'
    restore examples), each with an env-runner actor, Ray started by the first one."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size=128, minibatch_size=128, num_epochs=1)
        .resources(placement_timeout_s=15)
        .reporting(storage_path=str(tmp_path))
    )
    first = config.build()
    try:
        first.train()
        checkpoint = first.save()
        second = Algorithm.from_checkpoint(checkpoint)
        try:
            assert second.train()["num_healthy_env_runners"] == 1
            assert first.train()["num_healthy_env_runners"] == 1
        finally:
            second.stop()
    finally:
        first.stop()
        ray.shutdown()


@pytest.mark.parametrize(
    ("section", "key", "value", "why"),
    [
        ("env_runners", "create_env_on_driver", False, "the driver always creates"),
        ("env_runners", "no_done_at_end", True, "episodes end when the env ends them"),
        ("env_runners", "soft_horizon", True, "episodes end when the env ends them"),
    ],
)
def test_documented_settings_rltrainer_cannot_honour_say_why(section, key, value, why):
    with pytest.raises(ValueError, match=rf"{section}\(\): {key}={value!r} cannot take effect.*{why}"):
        getattr(PPOConfig(), section)(**{key: value})
    with pytest.raises(ValueError, match=rf"{key}={value!r} cannot take effect"):
        PPOConfig.from_dict({key: value})


def test_documented_settings_that_match_what_rltrainer_does_are_accepted():
    config = PPOConfig.from_dict({"create_env_on_driver": True, "eager_tracing": False})
    config.framework("torch", eager_tracing=False).env_runners(soft_horizon=False, no_done_at_end=False)
    assert "create_env_on_driver" not in config.to_dict()  # nothing to store: it is how rltrainer works
    # Either value of these describes what rltrainer does (RLlib's default and its alternative).
    config.offline_data(postprocess_inputs=False).offline_data(postprocess_inputs=True)
    config.offline_data(output_compress_columns=["obs", "new_obs"], input_config={})
    refused = r"output_compress_columns=\['obs'\] cannot take effect.*compressed whole"
    with pytest.raises(ValueError, match=refused):
        config.offline_data(output_compress_columns=["obs"])


#: RLlib 2.x's module of each algorithm rltrainer has, and the class names it exports there
#: (td3, ars, apex_dqn and apex_ddpg are RLlib 2.0-2.7's; bc is current).
RLLIB_ALGORITHM_MODULES = {
    "ppo": ["PPO", "PPOConfig"],
    "dqn": ["DQN", "DQNConfig"],
    "sac": ["SAC", "SACConfig"],
    "ddpg": ["DDPG", "DDPGConfig"],
    "td3": ["TD3", "TD3Config"],
    "impala": ["IMPALA", "IMPALAConfig"],
    "appo": ["APPO", "APPOConfig"],
    "a2c": ["A2C", "A2CConfig"],
    "a3c": ["A3C", "A3CConfig"],
    "pg": ["PG", "PGConfig"],
    "es": ["ES", "ESConfig"],
    "ars": ["ARS", "ARSConfig"],
    "bc": ["BC", "BCConfig"],
    "marwil": ["MARWIL", "MARWILConfig"],
    "cql": ["CQL", "CQLConfig"],
    "apex_dqn": ["ApexDQN", "ApexDQNConfig"],
    "apex_ddpg": ["ApexDDPG", "ApexDDPGConfig"],
}


@pytest.mark.parametrize("module", sorted(RLLIB_ALGORITHM_MODULES))
def test_rllibs_algorithm_modules_import_with_rltrainer_for_ray_rllib(module):
    """``from ray.rllib.algorithms.bc import BCConfig`` becomes ``from rltrainer.algorithms.bc
    import BCConfig`` (the migration page's promise), the same class as the registry's."""
    from rltrainer.algorithms.registry import get_algorithm_class

    imported = importlib.import_module(f"rltrainer.algorithms.{module}")
    algorithm, config = (getattr(imported, name) for name in RLLIB_ALGORITHM_MODULES[module])
    assert config is algorithm.config_class
    assert get_algorithm_class(config.ALGORITHM) is algorithm


#: RLlib's other import paths user code takes classes and helpers from (custom policies and
#: models, multi-agent configs, callbacks), each with ``ray.rllib`` changed to ``rltrainer``.
RLLIB_PATHS = {
    "policy.policy": ["Policy", "PolicySpec"],
    "policy.sample_batch": ["SampleBatch", "DEFAULT_POLICY_ID"],
    "models": ["ModelCatalog"],
    "models.torch.torch_modelv2": ["TorchModelV2"],
    "models.torch.fcnet": ["FullyConnectedNetwork"],
    "models.preprocessors": ["get_preprocessor"],
    "utils.framework": ["try_import_torch", "try_import_tf"],
    "utils.annotations": ["override", "PublicAPI", "DeveloperAPI"],
    "utils.typing": ["MultiAgentDict", "PolicyID", "AgentID", "ModelConfigDict", "TensorType"],
    "algorithms.algorithm": ["Algorithm"],
    "algorithms.algorithm_config": ["AlgorithmConfig"],
    "algorithms.callbacks": ["DefaultCallbacks"],
    "env.multi_agent_env": ["MultiAgentEnv", "make_multi_agent"],
    "env.env_context": ["EnvContext"],
    "env.policy_client": ["PolicyClient"],
    "env.policy_server_input": ["PolicyServerInput"],
    "env.wrappers.pettingzoo_env": ["PettingZooEnv", "ParallelPettingZooEnv"],
}


@pytest.mark.parametrize("path", sorted(RLLIB_PATHS))
def test_rllibs_import_paths_hold_their_names(path):
    module = importlib.import_module(f"rltrainer.{path}")
    missing = [name for name in RLLIB_PATHS[path] if not hasattr(module, name)]
    assert not missing, f"rltrainer.{path} lacks {missing}"


def test_the_policy_paths_give_the_same_classes():
    from rltrainer.policy import Policy, PolicySpec
    from rltrainer.policy import policy as rllib_path
    from rltrainer.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch
    from rltrainer.utils.sample_batch import SampleBatch as OurSampleBatch

    assert (rllib_path.Policy, rllib_path.PolicySpec) == (Policy, PolicySpec)
    assert SampleBatch is OurSampleBatch and DEFAULT_POLICY_ID == "default_policy"


def test_learners_and_api_stack_builders_of_rllibs_current_documents(caplog):
    """``.learners(...)`` sets what ``.resources(...)`` sets for learners; ``.api_stack(...)``'s
    switches are accepted with one logged line each, other keys refused naming the allowed."""
    from rltrainer.errors import ConfigError

    by_learners = PPOConfig().learners(num_learners=2, num_cpus_per_learner=0.5, num_gpus_per_learner=0)
    by_resources = PPOConfig().resources(num_learners=2, num_cpus_per_learner=0.5, num_gpus_per_learner=0)
    assert by_learners.to_dict() == by_resources.to_dict()
    with pytest.raises(
        ConfigError, match="learners\\(\\): unknown key 'local_gpu_idx'; allowed: num_learners"
    ):
        PPOConfig().learners(local_gpu_idx=0)
    with caplog.at_level("WARNING"):
        config = PPOConfig().api_stack(
            enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True
        )
    assert config.to_dict() == PPOConfig().to_dict()
    assert caplog.text.count("has no effect in rltrainer") == 2
    with pytest.raises(ConfigError, match="api_stack\\(\\): unknown key 'new'; allowed"):
        PPOConfig().api_stack(new=True)
    with pytest.raises(
        ConfigError, match=r"unknown key 'num_learners' \(set by \.resources\(\) or \.learners\(\)\)"
    ):
        PPOConfig().training(num_learners=1)


def test_rl_module_model_config_sets_the_same_network_as_the_model_dict(tmp_path):
    """RLlib's new-stack ``rl_module(model_config=DefaultModelConfig(...))`` (or a dict of its
    keys, over its defaults: shared layers, no free log std) gives the ``model`` settings of the
    same network; the algorithm builds and trains with them."""
    from rltrainer.core.rl_module.default_model_config import DefaultModelConfig
    from rltrainer.errors import ConfigError

    by_rl_module = PPOConfig().rl_module(
        model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="swish")
    )
    by_model = PPOConfig().training(
        model={
            "fcnet_hiddens": [32],
            "fcnet_activation": "silu",
            "vf_share_layers": True,
            "free_log_std": False,
        }
    )
    assert by_rl_module.to_dict() == by_model.to_dict()
    # Each head's own layers: the heads' networks are separate and use the encoder's activation.
    heads = PPOConfig().rl_module(
        model_config_dict={
            "fcnet_hiddens": [16],
            "head_fcnet_hiddens": [8],
            "head_fcnet_activation": "tanh",
            "vf_share_layers": False,
        }
    )
    assert heads.model.fcnet_hiddens == [16, 8] and not heads.model.vf_share_layers
    algo = heads.environment("CartPole-v1").training(train_batch_size=128, minibatch_size=64, num_epochs=1)
    algo = algo.reporting(storage_path=str(tmp_path)).build()
    try:
        assert algo.train()["timesteps_total"] == 128
        assert [w.shape for k, w in algo.get_policy().get_weights().items() if k.endswith("weight")][:2] == [
            (16, 4),
            (8, 16),
        ]
    finally:
        algo.stop()
    for bad, why in [
        ({"model_config": {"head_fcnet_hiddens": [8]}}, "policy and value heads are single linear layers"),
        ({"model_config": {"fcnet_hidens": [8]}}, "unknown model_config key 'fcnet_hidens' \\(did you mean"),
        ({"model_config": DefaultModelConfig(fcnet_kernel_initializer="xavier_uniform")}, "leave it None"),
        ({"model_config": {"log_std_clip_param": 2.0}}, "does not clip the log standard deviation"),
        ({"rl_module_spec": object()}, "write the network as a TorchModelV2 custom model"),
    ]:
        with pytest.raises(ConfigError, match=why):
            PPOConfig().rl_module(**bad)
