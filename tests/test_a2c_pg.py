"""A2C and PG (issue #19 item 3): their losses by hand, microbatches, learning, remote runners
and learners, checkpoints, callbacks, bad input and the Trainer-era names."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.a2c import A2C, A2CConfig
from rltrainer.algorithms.a2c.a2c_learner import A2CLearner
from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.pg import PG, PGConfig
from rltrainer.algorithms.pg.pg_learner import PGLearner, discounted_returns
from rltrainer.algorithms.ppo.ppo_learner import PPOBatch
from rltrainer.core.learner import make_learner
from rltrainer.env.env_runner import Rollout
from rltrainer.errors import ConfigError
from rltrainer.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = gym.make("CartPole-v1")
SPACES = (CARTPOLE.observation_space, CARTPOLE.action_space)


def tiny(config_class, tmp_path: Path, **training):
    """A small, fast config of ``config_class`` sampling in the driver."""
    return (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
        .training(train_batch_size=64, model={"fcnet_hiddens": [16]}, **training)
        .reporting(storage_path=str(tmp_path), min_time_s_per_iteration=0)
        .debugging(seed=0)
    )


def learner(config, learner_class):
    torch.manual_seed(0)
    return make_learner(learner_class, *SPACES, config, "cpu")


def batch(rows: int = 6, seed: int = 0) -> PPOBatch:
    rng = np.random.default_rng(seed)
    return PPOBatch(
        obs=rng.normal(size=(rows, 4)).astype(np.float32),
        actions=rng.integers(0, 2, rows),
        action_logp=np.full(rows, -0.7, np.float32),
        vf_preds=rng.normal(size=rows).astype(np.float32),
        advantages=rng.normal(size=rows).astype(np.float32),
        value_targets=rng.normal(size=rows).astype(np.float32),
    )


# --- the losses, by hand --------------------------------------------------------------------------
def by_hand(module, data: PPOBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log pi(a|s), entropy and V(s) of each row, from the network's outputs."""
    with torch.no_grad():
        logits, values = module(torch.from_numpy(data.obs))
    logp_all = torch.log_softmax(logits, -1).numpy().astype(np.float64)
    logp = logp_all[np.arange(len(data.actions)), data.actions]
    entropy = -(np.exp(logp_all) * logp_all).sum(-1)
    return logp, entropy, values.numpy().astype(np.float64)


def test_pg_loss_is_minus_mean_logp_times_returns(tmp_path):
    pg = learner(tiny(PGConfig, tmp_path), PGLearner)
    data = batch()
    logp, entropy, _ = by_hand(pg.module, data)
    loss, terms = pg.compute_loss(PPOBatch(*(torch.as_tensor(c) for c in data)))
    expected = -np.mean(logp * data.advantages)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert terms.tolist() == pytest.approx([expected, entropy.mean()], rel=1e-5)


def test_a2c_loss_is_rllibs_a3c_loss(tmp_path):
    config = tiny(A2CConfig, tmp_path, vf_loss_coeff=0.7, entropy_coeff=0.05)
    a2c = learner(config, A2CLearner)
    data = batch()
    logp, entropy, values = by_hand(a2c.module, data)
    loss, terms = a2c.compute_loss(PPOBatch(*(torch.as_tensor(c) for c in data)))
    policy_loss = -np.sum(logp * data.advantages)
    vf_loss = 0.5 * np.sum((values - data.value_targets) ** 2)
    total = policy_loss + 0.7 * vf_loss - 0.05 * entropy.sum()
    assert float(loss.detach()) == pytest.approx(total, rel=1e-5)
    assert terms.tolist() == pytest.approx([policy_loss, vf_loss, entropy.sum(), total], rel=1e-5)
    # Without the critic: no value loss (the advantages are the returns themselves).
    no_critic = learner(config.copy().training(use_critic=False, use_gae=False), A2CLearner)
    no_critic.set_weights(a2c.get_weights())
    loss, terms = no_critic.compute_loss(PPOBatch(*(torch.as_tensor(c) for c in data)))
    assert float(loss.detach()) == pytest.approx(policy_loss - 0.05 * entropy.sum(), rel=1e-5)
    assert terms[1] == 0


def test_pg_returns_bootstrap_nothing():
    # Env 0: an episode terminates at step 1, the next is cut by the fragment's end.
    # Env 1: truncated (time limit) at step 0; step 1 is the reset (invalid); then 2 steps.
    rewards = np.array([[1.0, 1.0], [2.0, 0.0], [3.0, 1.0], [4.0, 1.0]], np.float32)
    terminateds = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], bool)
    truncateds = np.array([[0, 1], [0, 0], [0, 0], [0, 0]], bool)
    valid = np.array([[1, 1], [1, 0], [1, 1], [1, 1]], bool)
    rollout = Rollout(
        obs=np.zeros((4, 2, 4), np.float32),
        actions=np.zeros((4, 2), np.int64),
        action_logp=np.zeros((4, 2), np.float32),
        rewards=rewards,
        terminateds=terminateds,
        truncateds=truncateds,
        valid=valid,
        last_obs=np.zeros((2, 4), np.float32),
    )
    returns = discounted_returns(rollout, gamma=0.5)
    np.testing.assert_allclose(returns[:, 0], [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])
    np.testing.assert_allclose(returns[[0, 2, 3], 1], [1, 1 + 0.5, 1])


# --- microbatches ---------------------------------------------------------------------------------
def test_microbatches_accumulate_to_one_full_batch_step(tmp_path):
    config = tiny(A2CConfig, tmp_path, grad_clip=None, lr=0.01, entropy_coeff=0.01)
    whole = learner(config, A2CLearner)
    micro = learner(config.copy().training(microbatch_size=16), A2CLearner)
    micro.set_weights(whole.get_weights())
    data = batch(rows=60)
    for step in range(3):  # Adam's later steps depend on the gradients' size, not only their sign
        stats_whole = whole.update_from_batch(data, timestep=step)
        stats_micro = micro.update_from_batch(data, timestep=step)
        # 4 microbatches (16, 16, 16, 12 rows): the same summed gradient, loss and step
        np.testing.assert_allclose(micro.flat_params.grad, whole.flat_params.grad, rtol=1e-4, atol=1e-5)
        for key in ("policy_loss", "vf_loss", "policy_entropy", "total_loss", "grad_gnorm"):
            assert stats_micro[key] == pytest.approx(stats_whole[key], rel=1e-4), key
    assert int(micro.optimizer.step_count) == int(whole.optimizer.step_count) == 3
    for name, weights in whole.get_weights().items():
        torch.testing.assert_close(micro.get_weights()[name], weights, rtol=1e-4, atol=1e-5)


# --- learning -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "config_class"), [("a2c", A2CConfig), ("pg", PGConfig)])
def test_tuned_example_reaches_150(tmp_path, name, config_class):
    """The tuned example's settings, to RLlib's tuned examples' stop of 150 (the example
    itself goes on to 475: about 10x the steps)."""
    (experiment,) = yaml.safe_load((ROOT / "tuned_examples" / f"{name}_cartpole.yaml").read_text()).values()
    assert experiment["run"] == config_class.ALGORITHM
    config = (
        config_class()
        .environment(experiment["env"])
        .update_from_dict(experiment["config"])
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        result = algo.train()
        while result["episode_return_mean"] < 150 and result["timesteps_total"] < 100_000:
            result = algo.train()
        assert result["episode_return_mean"] >= 150, result["timesteps_total"]
        assert np.isfinite([result[key] for key in config_class.STAT_KEYS if key != "vf_explained_var"]).all()
    finally:
        algo.stop()


# --- remote env runners and learners ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("config_class", "learner_class", "training"),
    [(A2CConfig, A2CLearner, {"microbatch_size": 24}), (PGConfig, PGLearner, {})],
)
@pytest.mark.usefixtures("local_ray")
def test_remote_env_runners_and_ddp_learners(tmp_path, config_class, learner_class, training):
    # One remote runner (each actor costs ~4.5 CPU-s of imports; several runners: test_distributed)
    # and two learners fit the shared cluster's 4 CPUs (no Ray instance of this module's own).
    config = (
        tiny(config_class, tmp_path, **training)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .resources(num_learners=2, num_cpus_per_env_runner=0.5)
    )
    algo = config.build()
    try:
        before = algo.get_policy().get_weights()
        results = [algo.train() for _ in range(2)]
        after = algo.get_policy().get_weights()
        assert any(not np.array_equal(after[k], before[k]) for k in before)
        for result in results:
            assert result["num_env_steps_sampled"] >= 64
            for key in config_class.STAT_KEYS:
                assert key in result and key in result["info"]["learner"]["default_policy"]["learner_stats"]
            assert np.isfinite(result["policy_loss"]) and np.isfinite(result["grad_gnorm"])

        # Two DDP learners, each on half a batch, take the step one learner takes on all of it
        # (A2C's summed loss and microbatches, PG's mean).
        data = batch(rows=60)
        weights = algo.learner_group.foreach_learner(lambda lrn: lrn.get_weights())
        for name, value in weights[0].items():
            torch.testing.assert_close(weights[1][name], value)

        def half_batch_step(lrn):
            import torch.distributed as dist

            shard = PPOBatch(*(column[dist.get_rank() :: 2] for column in data))
            stats = lrn.update_from_batch(shard, timestep=0)
            return lrn.world_size, lrn.flat_params.grad.clone(), stats["grad_gnorm"]

        shared = algo.learner_group.foreach_learner(half_batch_step)
        alone = make_learner(learner_class, *SPACES, config.copy().resources(num_learners=0), "cpu")
        alone.set_weights(weights[0])
        stats = alone.update_from_batch(data, timestep=0)
        for world_size, grad, grad_norm in shared:
            assert world_size == 2
            torch.testing.assert_close(grad, alone.flat_params.grad, rtol=1e-4, atol=1e-5)
            assert grad_norm == pytest.approx(stats["grad_gnorm"], rel=1e-4)
    finally:
        algo.stop()


# --- checkpoints and callbacks ----------------------------------------------------------------------
@pytest.mark.parametrize(("algo_class", "config_class"), [(A2C, A2CConfig), (PG, PGConfig)])
def test_checkpoint_round_trip(tmp_path, algo_class, config_class):
    algo = tiny(config_class, tmp_path / "a").build()
    try:
        algo.train()
        path = algo.save()
        restored = Algorithm.from_checkpoint(path, config_overrides={"storage_path": str(tmp_path / "b")})
        try:
            assert type(restored) is algo_class
            assert restored.config.to_dict() == {**algo.config.to_dict(), "storage_path": str(tmp_path / "b")}
            for name, value in algo.learner_group.get_state()["weights"].items():
                torch.testing.assert_close(restored.learner_group.get_state()["weights"][name], value)
            step = algo.learner_group.local_learner.get_optimizer_state()["step"]
            assert int(restored.learner_group.local_learner.get_optimizer_state()["step"]) == int(step) == 1
            result = restored.train()
            assert result["training_iteration"] == 2
            obs = np.zeros(4, np.float32)
            _, _, extra = restored.compute_single_action(obs, explore=False, full_fetch=True)
            assert ("vf_preds" in extra) == (algo_class is A2C)  # PG's policy has no value function
        finally:
            restored.stop()
    finally:
        algo.stop()
    policy = Policy.from_checkpoint(path)
    assert type(policy) is algo_class.policy_class


class ZeroAdvantages(DefaultCallbacks):
    def on_learn_on_batch(self, *, train_batch, result, **_kwargs):
        result["rows_seen"] = len(train_batch)
        train_batch["advantages"] = np.zeros_like(train_batch["advantages"])

    def on_train_result(self, *, result, **_kwargs):
        result["my_key"] = 7


def test_callbacks_see_and_rewrite_the_train_batch(tmp_path):
    algo = tiny(PGConfig, tmp_path).callbacks(ZeroAdvantages).build()
    try:
        before = algo.get_policy().get_weights()
        result = algo.train()
        assert result["my_key"] == 7 and result["rows_seen"] == result["num_env_steps_trained"] >= 64
        assert result["policy_loss"] == 0.0 and result["grad_gnorm"] == 0.0
        after = algo.get_policy().get_weights()
        assert all(np.array_equal(after[k], before[k]) for k in before)  # a zero gradient moves nothing
    finally:
        algo.stop()


@pytest.mark.parametrize("config_class", [A2CConfig, PGConfig])
def test_lstm_policies_train(tmp_path, config_class):
    config = tiny(config_class, tmp_path).training(
        model={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8}
    )
    if config_class is A2CConfig:
        config.training(microbatch_size=20)
    algo = config.build()
    try:
        result = algo.train()
        assert np.isfinite(result["policy_loss"]) and result["num_env_steps_trained"] >= 64
    finally:
        algo.stop()


# --- bad input and names ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: A2CConfig().training(train_batch_size=100, microbatch_size=101),
            "microbatch_size \\(101\\)",
        ),
        (lambda: A2CConfig().training(use_critic=False), "use_gae=True needs the value function"),
        (lambda: PGConfig().training(use_critic=True), "'use_critic'.*PG has no value function"),
        (lambda: PGConfig().training(**{"lambda": 0.9}), "'lambda'.*A2CConfig has it"),
        (lambda: PGConfig().update_from_dict({"vf_loss_coeff": 0.5}), "'vf_loss_coeff'"),
        (lambda: PGConfig().training(microbatch_size=8), "'microbatch_size'"),
        (lambda: A2CConfig().training(microbatch_size=0), "'microbatch_size'"),
    ],
)
def test_bad_settings_are_named_at_build(make, message):
    with pytest.raises(ConfigError, match=message):
        make().environment("CartPole-v1").build()


def test_defaults_are_rllibs():
    a2c, pg = A2CConfig(), PGConfig()
    assert (a2c.lr, a2c.grad_clip, a2c.vf_loss_coeff, a2c.entropy_coeff) == (1e-4, 40.0, 0.5, 0.01)
    assert (a2c.use_critic, a2c.use_gae, a2c.lambda_, a2c.microbatch_size) == (True, True, 1.0, None)
    assert (a2c.num_env_runners, a2c.min_time_s_per_iteration, a2c.train_batch_size) == (2, 10.0, 32)
    assert (pg.lr, pg.train_batch_size, pg.rollout_fragment_length) == (0.0004, 200, "auto")


def test_trainer_era_names():
    import rltrainer.agents.a2c as a2c
    import rltrainer.agents.pg as pg

    assert a2c.A2CTrainer is A2C and a2c.A2CConfig is A2CConfig
    assert a2c.DEFAULT_CONFIG == a2c.A2C_DEFAULT_CONFIG == A2CConfig().to_dict()
    assert pg.PGTrainer is PG and pg.PGConfig is PGConfig
    assert PGConfig().to_dict() == pg.DEFAULT_CONFIG
    assert PGConfig.from_dict(pg.DEFAULT_CONFIG).to_dict() == pg.DEFAULT_CONFIG
