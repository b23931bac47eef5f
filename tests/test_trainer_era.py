"""The Trainer era's names (issue #23 item 1): thin aliases of today's classes, one implementation."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.core.distributions import ActionDistribution, Categorical, DiagGaussian, SquashedGaussian
from rltrainer.core.exploration import EpsilonGreedy, Exploration, StochasticSampling


@pytest.fixture(scope="module")
def algo(tmp_path_factory):
    """A tiny PPO with a local evaluation group, trained one iteration."""
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .evaluation(evaluation_interval=1, evaluation_duration=1, evaluation_config={"explore": False})
        .env_runners(observation_filter="MeanStdFilter")
        .reporting(storage_path=str(tmp_path_factory.mktemp("results")))
        .debugging(seed=0)
        .build()
    )
    algo.train()
    yield algo
    algo.stop()


# --- rltrainer.agents.<algo> --------------------------------------------------------------------
def test_the_documents_ppo_trainer_recipe_trains(tmp_path):
    import rltrainer.agents.ppo as ppo

    config = ppo.DEFAULT_CONFIG.copy()
    config["num_workers"] = 0
    config.update(train_batch_size=64, sgd_minibatch_size=32, num_sgd_iter=1, storage_path=str(tmp_path))
    trainer = ppo.PPOTrainer(config=config, env="CartPole-v1")
    try:
        result = trainer.train()
    finally:
        trainer.stop()
    assert ppo.PPOTrainer is PPO
    assert isinstance(trainer.config, PPOConfig)
    assert (trainer.config.env, trainer.config.minibatch_size) == ("CartPole-v1", 32)
    assert result["training_iteration"] == 1 and result["timesteps_total"] >= 64


@pytest.mark.parametrize("algo_name", ["ppo", "dqn", "sac"])
def test_agents_packages_re_export_todays_classes(algo_name):
    import importlib

    agents = importlib.import_module(f"rltrainer.agents.{algo_name}")
    current = importlib.import_module(f"rltrainer.algorithms.{algo_name}")
    name = algo_name.upper()
    assert getattr(agents, f"{name}Trainer") is getattr(current, name)
    config_class = getattr(current, f"{name}Config")
    assert getattr(agents, f"{name}Config") is config_class
    default = agents.DEFAULT_CONFIG
    assert default == config_class().to_dict()
    assert config_class.from_dict(default).to_dict() == default
    assert json.loads(json.dumps(default)) == default  # plain data
    default["lr"] = 123.0  # a fresh dict per access: the defaults stay
    assert agents.DEFAULT_CONFIG["lr"] != 123.0
    with pytest.raises(AttributeError):
        agents.NoSuchTrainer  # noqa: B018


def test_agents_callbacks_is_the_same_class():
    from rltrainer.agents.callbacks import DefaultCallbacks
    from rltrainer.algorithms import callbacks

    assert DefaultCallbacks is callbacks.DefaultCallbacks


# --- pretty_print -----------------------------------------------------------------------------
def test_pretty_print_writes_tunes_yaml():
    from rltrainer import pretty_print
    from rltrainer.tune.logger import pretty_print as tune_pretty_print

    assert pretty_print is tune_pretty_print
    result = {
        "training_iteration": 3,
        "episode_return_mean": np.float32(21.5),
        "info": {"learner": {"kl": np.float64(0.01)}},
        "short": [1, 2],
        "long": np.arange(5),
        "config": {"lr": 1.0},
        "hist_stats": {"episode_reward": [1.0]},
        "nothing": None,
        "skip_me": 1,
    }
    text = pretty_print(result, exclude=["skip_me"])
    assert "long: [0, 1, 2, 3, 4]\n" in text and "short:\n- 1\n- 2\n" in text
    assert yaml.safe_load(text) == {
        "training_iteration": 3,
        "episode_return_mean": 21.5,
        "info": {"learner": {"kl": 0.01}},
        "short": [1, 2],
        "long": [0, 1, 2, 3, 4],
    }


def test_import_rltrainer_stays_cheap():
    code = "import sys, rltrainer; print(sorted(m for m in ('yaml', 'ray', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- config dict access and older keys ----------------------------------------------------------
def test_configs_read_and_write_like_dicts():
    config = PPOConfig()
    assert config["lr"] == config.get("lr") == 5e-5
    assert config["lambda"] == config.lambda_ and config["num_workers"] == config.num_env_runners
    assert "lr" in config and "num_workers" in config and "no_such_key" not in config and 3 not in config
    assert config.get("no_such_key", "default") == "default"
    config["lr"] = 1e-3
    config["num_workers"] = 2
    assert (config.lr, config.num_env_runners) == (1e-3, 2)
    with pytest.raises(KeyError):
        config["no_such_key"]  # noqa: B018
    with pytest.raises(ValueError, match="invalid value for 'lr'"):
        config["lr"] = "fast"
    with pytest.raises(ValueError, match="unknown key 'lrr'"):
        config["lrr"] = 1e-3


def test_more_older_keys_and_where_they_belong():
    config = PPOConfig.from_dict({"evaluation_num_episodes": 3, "timesteps_per_iteration": 500})
    assert (config.evaluation_duration, config.min_sample_timesteps_per_iteration) == (3, 500)
    assert PPOConfig().reporting(timesteps_per_iteration=7).min_sample_timesteps_per_iteration == 7
    assert PPOConfig().evaluation(evaluation_num_episodes=2).evaluation_duration == 2
    with pytest.raises(ValueError) as err:
        PPOConfig().training(timesteps_per_iteration=7)
    assert "older name of 'min_sample_timesteps_per_iteration', set by .reporting()" in str(err.value)
    assert "did you mean" not in str(err.value)
    with pytest.raises(ValueError, match=r"unknown key 'num_env_runners' \(set by \.env_runners\(\)\)"):
        PPOConfig().training(num_env_runners=2)


# --- distributions and exploration ------------------------------------------------------------
def test_distributions_answer_to_rllibs_names():
    torch.manual_seed(0)
    logits = torch.randn(6, 3)
    dist, ref = Categorical(logits, None), torch.distributions.Categorical(logits=logits)
    actions = dist.sample()
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.sampled_action_logp(), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    other = Categorical(torch.randn(6, 3))
    expected = torch.distributions.kl_divergence(ref, torch.distributions.Categorical(logits=other.logits))
    torch.testing.assert_close(dist.kl(other), expected)

    inputs = torch.randn(6, 4)
    gauss = DiagGaussian(inputs)
    normal = torch.distributions.Normal(gauss.mean, gauss.std)
    actions = gauss.sample()
    torch.testing.assert_close(gauss.logp(actions), normal.log_prob(actions).sum(-1))
    torch.testing.assert_close(gauss.sampled_action_logp(), normal.log_prob(actions).sum(-1))
    torch.testing.assert_close(gauss.entropy(), normal.entropy().sum(-1))
    with pytest.raises(ValueError, match="call sample"):
        DiagGaussian(inputs).sampled_action_logp()

    squashed = SquashedGaussian(torch.cat([0.1 * torch.randn(6, 2), torch.full((6, 2), -1.0)], dim=-1))
    actions, logp = squashed.rsample_with_logp()
    torch.testing.assert_close(squashed.logp(actions), logp, atol=1e-4, rtol=1e-4)
    assert squashed.sample().abs().max() < 1


def test_exploration_explores_by_default():
    dist = ActionDistribution(
        Categorical, np.array([[0.0, 2.0]] * 2000, dtype=np.float32), np.random.default_rng(0)
    )
    for exploration in (Exploration(gym.spaces.Discrete(2)), StochasticSampling(gym.spaces.Discrete(2))):
        actions, _ = exploration.get_exploration_action(action_distribution=dist, timestep=0)
        assert 100 < (actions == 0).sum() < 400  # sampled (p = 0.12), not argmax
    greedy = EpsilonGreedy(gym.spaces.Discrete(2), initial_epsilon=1.0, rng=np.random.default_rng(0))
    assert (greedy.get_exploration_action(dist, 0)[0] == 0).sum() > 500


# --- env runners, policies and the algorithm's inference --------------------------------------
def test_env_runner_access_the_documents_use(algo):
    from rltrainer.evaluation.rollout_worker import RolloutWorker, get_global_worker

    local = algo.workers.local_worker()
    assert get_global_worker() is local and RolloutWorker is type(local)
    assert local.preprocessors["default_policy"] is local.policy.preprocessor
    assert local.filters["default_policy"] is local.filter
    assert type(local.filter).__name__ == "MeanStdFilter"
    assert local.policy_config["in_evaluation"] is False
    assert local.policy_config["lr"] == algo.config.lr and local.policy_config["num_env_runners"] == 0
    evaluation = algo.evaluation_workers.local_worker()
    assert evaluation.policy_config["in_evaluation"] is True
    assert evaluation.policy_config["explore"] is False
    assert get_global_worker() is local  # an evaluation runner does not replace the training one
    assert algo.workers.foreach_worker_with_id(lambda index, runner: (index, runner.in_evaluation)) == [
        (0, False)
    ]


def test_policy_compute_actions_returns_rllibs_triple(algo):
    policy = algo.get_policy()
    obs = np.zeros((3, 4), dtype=np.float32)
    actions, state_outs, extra = policy.compute_actions(obs, explore=False)
    assert actions.shape == (3,) and state_outs == []
    assert set(extra) >= {"action_logp", "action_dist_inputs", "vf_preds"}
    assert extra["vf_preds"].shape == (3,)
    np.testing.assert_array_equal(actions, np.argmax(extra["action_dist_inputs"], axis=-1))
    # RLlib's Policy.compute_single_action (what its docs call on Policy.from_checkpoint(...)): one row
    action, state_out, one = policy.compute_single_action(obs[0], explore=False)
    assert action == actions[0] and state_out == [] and one["vf_preds"] == extra["vf_preds"][0]
    assert policy.compute_single_action(input_dict={"obs": obs[0]}, explore=False)[0] == action
    with pytest.raises(ValueError, match="needs an observation"):
        policy.compute_single_action()


def test_compute_single_action_return_forms(algo):
    obs = np.array([0.0, 0.1, 0.0, -0.1], dtype=np.float32)
    action = algo.compute_single_action(obs, explore=False)
    assert action in algo.action_space
    for kwargs in ({"full_fetch": True}, {"state": []}, {"state": [], "prev_action": 0, "prev_reward": 1.0}):
        out_action, state_out, extra = algo.compute_single_action(
            obs, policy_id="default_policy", explore=False, **kwargs
        )
        assert out_action == action and state_out == [] and "action_logp" in extra
    assert algo.compute_action(obs, explore=False) == action
