"""SAC: squashed-Gaussian math, entropy tuning, configs, checkpoints, remote env runners, learning
(remote runners and the CLI for DQN and TD3 too)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.sac import SAC, SACConfig
from rltrainer.core.distributions import SquashedGaussian
from rltrainer.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def tiny(tmp_path: Path, env: str = "Pendulum-v1", **training) -> SACConfig:
    return (
        SACConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=4)
        .training(
            **{
                "train_batch_size": 16,
                "num_steps_sampled_before_learning_starts": 16,
                "q_model_config": {"fcnet_hiddens": [16]},
                "policy_model_config": {"fcnet_hiddens": [16]},
                "replay_buffer_config": {"capacity": 1000},
                **training,
            }
        )
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=48)
        .debugging(seed=0)
    )


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    inputs = torch.randn(1000, 4, dtype=torch.float64)
    actions, logp = SquashedGaussian(inputs).rsample_with_logp()
    mean, log_std = inputs.chunk(2, dim=-1)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp()), 1),
        [torch.distributions.TanhTransform(cache_size=1)],
    )
    assert torch.all(actions.abs() <= 1)
    inner = torch.atanh(actions.clamp(-0.999, 0.999))
    keep = (inner.abs() < 2.5).all(-1)  # away from tanh's saturation, where atanh loses precision
    torch.testing.assert_close(logp[keep], reference.log_prob(actions)[keep], rtol=1e-6, atol=1e-6)


def test_numpy_and_torch_squashed_gaussian_agree():
    inputs = np.array([[0.3, -1.2, -0.5, 0.1], [2.0, 0.0, -30.0, 5.0]], np.float32)  # log std clamped
    actions, logp = SquashedGaussian.sample_numpy(inputs, explore=False, rng=np.random.default_rng(0))
    np.testing.assert_allclose(actions, np.tanh(inputs[:, :2]), rtol=1e-6)
    dist = SquashedGaussian(torch.from_numpy(inputs))
    u = torch.from_numpy(inputs[:, :2])
    gaussian = (-dist.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    correction = (2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))).sum(-1)
    np.testing.assert_allclose(logp, (gaussian - correction).numpy(), rtol=1e-5)
    np.testing.assert_allclose(dist.deterministic_sample().numpy(), actions, rtol=1e-6)


@pytest.mark.parametrize(
    ("env", "expected"),
    [("Pendulum-v1", -1.0), ("CartPole-v1", 0.98 * math.log(2)), ("MountainCarContinuous-v0", -1.0)],
)
def test_auto_target_entropy(tmp_path, env, expected):
    algo = tiny(tmp_path, env=env).build()
    try:
        assert algo.learner_group.local_learner.target_entropy == pytest.approx(expected)
    finally:
        algo.stop()
    assert SACConfig().training(target_entropy=-3.0).get_target_entropy(False, 1) == -3.0


def test_alpha_rises_when_entropy_is_below_target(tmp_path):
    # A target entropy far above what a 1-D squashed Gaussian reaches: alpha must grow.
    algo = tiny(tmp_path, target_entropy=5.0, initial_alpha=0.5).build()
    try:
        result = algo.train()
        result = algo.train()
        assert result["alpha_value"] > 0.5
        assert np.isfinite(result["critic_loss"]) and np.isfinite(result["actor_loss"])
    finally:
        algo.stop()


def test_targets_follow_the_critics_by_polyak_averaging(tmp_path):
    algo = tiny(tmp_path, tau=0.5).build()
    try:
        learner = algo.learner_group.local_learner
        algo.train()
        # tau 0.5 after every gradient step: the targets trail the critics closely, never equal
        gap = (learner.target.data - learner.critic_params.data).abs().max().item()
        assert 0 < gap < 0.05
        trained = [n for n, p in learner.module.named_parameters() if "target" in n and p.requires_grad]
        assert not trained  # target parameters are not trained by gradients
    finally:
        algo.stop()


def test_discrete_sac_runs_and_acts_greedily(tmp_path):
    algo = tiny(tmp_path, env="CartPole-v1").build()
    try:
        result = algo.train()
        assert np.isfinite(result["critic_loss"]) and 0 < result["entropy"] <= math.log(2) + 1e-6
        obs = np.zeros(4, np.float32)
        logits = algo.compute_single_action(obs, explore=False, full_fetch=True)[2]["action_dist_inputs"]
        assert algo.compute_single_action(obs, explore=False) == int(np.argmax(logits))
    finally:
        algo.stop()


@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_checkpoint_round_trip(tmp_path, env):
    algo = tiny(tmp_path, env=env).checkpointing(store_buffer_in_checkpoints=True).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        obs = algo.env_runner_group.local_worker().env.single_observation_space.sample() * 0
        action = algo.compute_single_action(obs, explore=False)
        learner = algo.learner_group.local_learner
        log_alpha = learner.module.log_alpha.item()
        steps = {name: opt.step_count for name, opt in learner.optimizers.items()}
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert isinstance(restored, SAC)
        np.testing.assert_allclose(restored.compute_single_action(obs, explore=False), action, rtol=1e-6)
        learner = restored.learner_group.local_learner
        assert learner.module.log_alpha.item() == pytest.approx(log_alpha)
        assert {name: opt.step_count for name, opt in learner.optimizers.items()} == steps
        assert len(restored.replay_buffer) > 0
        restored.train()
    finally:
        restored.stop()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"optimization_config": {"actor_lr": 1e-3}},
            "unknown key(s) ['actor_lr']; allowed: actor_learning_rate",
        ),
        ({"optimization_config": {"critic_learning_rate": 0.0}}, "learning rates must be > 0"),
        ({"q_model_config": {"fcnet_hidden": [8]}}, "unknown key(s) ['fcnet_hidden']"),
        ({"policy_model_config": {"fcnet_activation": "gelu"}}, "fcnet_activation"),
        ({"target_entropy": "high"}, 'must be "auto" or a number'),
        ({"initial_alpha": 0.0}, "invalid value for 'initial_alpha'"),
        ({"dueling": True}, "training(): unknown key 'dueling'"),
    ],
)
def test_bad_configs_are_rejected_with_the_key(kwargs, message):
    with pytest.raises(ConfigError) as err:
        SACConfig().environment("Pendulum-v1").training(**kwargs).validate()
    assert message in str(err.value)


def test_sac_needs_the_driver_learner():
    with pytest.raises(ConfigError, match="num_learners=0"):
        SACConfig().environment("Pendulum-v1").resources(num_learners=1).validate()


@pytest.mark.usefixtures("local_ray")  # a new local instance (tests/conftest.py)
@pytest.mark.parametrize("algo", ["DQN", "SAC", "TD3"])
def test_one_remote_env_runner(tmp_path, algo):
    if algo == "SAC":
        config = tiny(tmp_path)
    elif algo == "TD3":
        from tests.test_ddpg import tiny as tiny_td3

        config = tiny_td3(tmp_path)
    else:
        config = (
            DQNConfig()
            .environment("CartPole-v1")
            .training(num_steps_sampled_before_learning_starts=16, train_batch_size=16)
            .training(model={"fcnet_hiddens": [16]}, hiddens=[])
            .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=48)
        )
    algo = config.env_runners(num_env_runners=1).build()
    try:
        algo.train()
        result = algo.train()
        assert result["num_healthy_env_runners"] == 1 and result["num_env_steps_trained"] > 0
        # the remote runner acts with the trained weights and follows the algorithm's timesteps
        timestep, weights = algo.workers.foreach_worker(
            lambda runner: (runner.policy.global_timestep, runner.get_weights()), local_worker=False
        )[0]
        assert timestep >= algo.counters.timesteps_total - 48
        local = algo.learner_group.local_learner.get_policy_weights()
        for name, value in local.items():
            np.testing.assert_array_equal(weights[name], value.numpy())
    finally:
        algo.stop()


@pytest.mark.e2e_only("the entropy, polyak and remote runner tests and test_cli_train_and_evaluate")
def test_tuned_example_solves_pendulum(tmp_path):
    """The benchmark's criterion: 20-episode training mean >= -200, then a greedy evaluation."""
    spec = yaml.safe_load((ROOT / "tuned_examples" / "sac_pendulum.yaml").read_text())["pendulum-sac"]
    config = SACConfig().environment(spec["env"]).update_from_dict(spec["config"])
    config.reporting(storage_path=str(tmp_path), metrics_num_episodes_for_smoothing=20).debugging(seed=0)
    algo = config.evaluation(evaluation_duration=10, evaluation_config={"explore": False}).build()
    try:
        while True:
            result = algo.train()
            if result["episode_return_mean"] >= -200 or result["timesteps_total"] >= 20_000:
                break
        assert result["episode_return_mean"] >= -200, result["timesteps_total"]
        assert algo.evaluate()["evaluation"]["episode_return_mean"] >= -200
    finally:
        algo.stop()


@pytest.mark.parametrize("algo", ["SAC", "TD3"])
def test_cli_train_and_evaluate(tmp_path, capsys, algo):
    from rltrainer.cli import main

    config = '{"num_steps_sampled_before_learning_starts": 16, "train_batch_size": 16}'
    args = ["train", "--algo", algo, "--env", "Pendulum-v1", "--storage-path", str(tmp_path)]
    assert main([*args, "--stop", '{"timesteps_total": 200}', "--config", config, "--checkpoint-at-end"]) == 0
    (checkpoint,) = tmp_path.glob(f"{algo}_Pendulum-v1/*/checkpoint_*")
    assert main(["evaluate", str(checkpoint), "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
