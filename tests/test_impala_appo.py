"""IMPALA and APPO: V-trace against hand-computed values and its on-policy reduction, the
asynchronous training step (stragglers, killed runners, the learner queue), learning CartPole
with remote runners, checkpoints and bad settings."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from rltrainer.algorithms.appo import APPO, APPOConfig
from rltrainer.algorithms.impala import IMPALAConfig
from rltrainer.algorithms.impala.impala import MinibatchBuffer, ReplaySlots, TrainBatch
from rltrainer.algorithms.impala.impala_learner import trajectory_batch
from rltrainer.env.env_runner import Rollout
from rltrainer.errors import ConfigError, WorkerError
from rltrainer.utils.postprocessing import compute_gae
from rltrainer.utils.vtrace import vtrace
from tests.ray_clusters import kill_actor

GAMMA = 0.9


def vtrace_by_definition(log_rhos, rewards, values, bootstrap, discounts, rho_bar, pg_rho_bar, c_bar=1.0):
    """V-trace as the paper writes it (a sum over the future, no recursion), one trajectory,
    no invalid rows: v_s = V(x_s) + sum_t (prod_{i<t} discount_i c_i) delta_t."""
    horizon = len(rewards)
    rhos = np.exp(log_rhos)
    clipped, cs = np.minimum(rho_bar, rhos), np.minimum(c_bar, rhos)
    next_values = np.append(values[1:], bootstrap)
    deltas = clipped * (rewards + discounts * next_values - values)
    vs = np.zeros(horizon)
    for s in range(horizon):
        total, weight = 0.0, 1.0
        for t in range(s, horizon):
            total += weight * deltas[t]
            weight *= discounts[t] * cs[t]
        vs[s] = values[s] + total
    next_vs = np.append(vs[1:], bootstrap)
    advantages = np.minimum(pg_rho_bar, rhos) * (rewards + discounts * next_vs - values)
    return vs, advantages


def as_tensors(*arrays):
    return [torch.as_tensor(np.asarray(a, dtype=np.float32))[None] for a in arrays]


def test_vtrace_matches_hand_computed_values():
    # Two steps, rho = 2 (clipped to 1 for the values, 1.5 for the policy gradient) then 0.5.
    log_rhos, rewards = np.log([2.0, 0.5]), np.array([1.0, 2.0])
    values, bootstrap = np.array([0.5, 1.0]), 3.0
    discounts = np.array([GAMMA, GAMMA])
    vs, adv = vtrace(
        *as_tensors(log_rhos, rewards, values),
        torch.tensor([bootstrap]),
        *as_tensors(discounts),
        torch.ones(1, 2, dtype=torch.bool),
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.5,
    )
    # By hand: delta_1 = 0.5 * (2 + 0.9 * 3 - 1) = 1.85, v_1 = 1 + 1.85 = 2.85;
    # delta_0 = 1 * (1 + 0.9 * 1 - 0.5) = 1.4, c_0 = 1, v_0 = 0.5 + 1.4 + 0.9 * 1 * 1.85 = 3.565.
    np.testing.assert_allclose(vs[0].numpy(), [3.565, 2.85], rtol=1e-6)
    # adv_0 = 1.5 * (1 + 0.9 * 2.85 - 0.5) = 4.5975; adv_1 = 0.5 * (2 + 0.9 * 3 - 1) = 1.85.
    np.testing.assert_allclose(adv[0].numpy(), [4.5975, 1.85], rtol=1e-6)


def test_vtrace_matches_the_definition_on_random_trajectories():
    rng = np.random.default_rng(0)
    for _ in range(20):
        horizon = int(rng.integers(1, 12))
        log_rhos = rng.normal(0, 0.8, horizon)
        rewards, values = rng.normal(size=horizon), rng.normal(size=horizon)
        discounts = np.where(rng.random(horizon) < 0.2, 0.0, GAMMA)
        bootstrap = float(rng.normal())
        expected_vs, expected_adv = vtrace_by_definition(
            log_rhos, rewards, values, bootstrap, discounts, 1.0, 1.0
        )
        vs, adv = vtrace(
            *as_tensors(log_rhos, rewards, values),
            torch.tensor([bootstrap], dtype=torch.float32),
            *as_tensors(discounts),
            torch.ones(1, horizon, dtype=torch.bool),
        )
        np.testing.assert_allclose(vs[0].numpy(), expected_vs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(adv[0].numpy(), expected_adv, rtol=1e-4, atol=1e-5)


def test_on_policy_vtrace_is_the_bootstrapped_return_across_episode_boundaries():
    """pi = mu: v_s is the discounted return to the episode's end (terminated: nothing after;
    truncated: the value of its final observation), or to the fragment's end plus the bootstrap
    value, exactly GAE(lambda=1)'s value targets, in the runners' next-step-autoreset layout."""
    rng = np.random.default_rng(1)
    horizon, envs = 30, 4
    rewards = rng.normal(size=(horizon, envs)).astype(np.float32)
    values = rng.normal(size=(horizon, envs)).astype(np.float32)
    last_values = rng.normal(size=envs).astype(np.float32)
    terminateds = np.zeros((horizon, envs), bool)
    truncateds = np.zeros((horizon, envs), bool)
    valid = np.ones((horizon, envs), bool)
    terminateds[5, 0] = truncateds[12, 0] = terminateds[3, 1] = truncateds[20, 2] = True
    for t, n in zip(*np.nonzero(terminateds | truncateds), strict=True):
        valid[t + 1, n] = False  # the reset row after an episode's last step
    rewards[~valid] = 123.0  # what an invalid row holds must not matter
    _, targets = compute_gae(
        rewards,
        values,
        terminateds.astype(np.float32),
        (terminateds | truncateds).astype(np.float32),
        last_values,
        GAMMA,
        1.0,
    )
    vs, adv = vtrace(
        torch.zeros(envs, horizon),
        torch.as_tensor(rewards.T.copy()),
        torch.as_tensor(values.T.copy()),
        torch.as_tensor(last_values),
        torch.as_tensor((GAMMA * (1 - terminateds)).T.astype(np.float32)),
        torch.as_tensor(valid.T.copy()),
    )
    np.testing.assert_allclose(vs.numpy().T[valid], targets[valid], rtol=1e-4, atol=1e-4)
    assert np.all(adv.numpy().T[~valid] == 0)


def test_shorter_rollouts_are_padded_at_the_front_with_invalid_rows():
    def rollout(horizon: int, fill: float) -> Rollout:
        shape = (horizon, 2)
        return Rollout(
            obs=np.full((*shape, 3), fill, np.float32),
            actions=np.ones(shape, np.int64),
            action_logp=np.zeros(shape, np.float32),
            rewards=np.full(shape, fill, np.float32),
            terminateds=np.zeros(shape, bool),
            truncateds=np.zeros(shape, bool),
            valid=np.ones(shape, bool),
            last_obs=np.full((2, 3), fill, np.float32),
        )

    batch = trajectory_batch([rollout(5, 1.0), rollout(3, 2.0)])
    assert batch.obs.shape == (4, 5, 3) and batch.last_obs.shape == (4, 3)
    np.testing.assert_array_equal(batch.valid[2:, :2], False)
    np.testing.assert_array_equal(batch.valid[2:, 2:], True)
    np.testing.assert_array_equal(batch.rewards[2:, 2:], 2.0)


def test_minibatch_buffer_replays_each_batch_num_epochs_times_in_turn():
    from collections import deque

    batches = [TrainBatch([], [i]) for i in range(4)]
    queue = deque(batches)
    buffer = MinibatchBuffer(size=2, num_passes=2)
    order = [buffer.next(queue).weights_trained_at[0] for _ in range(8)]
    assert order == [0, 1, 0, 1, 2, 3, 2, 3]
    assert buffer.needs_batch() and buffer.next(queue) is None
    queue.append(TrainBatch([], [4]))
    assert buffer.next(queue).weights_trained_at == [4]
    assert buffer.needs_batch()  # slot 1 (batch 3) is spent: the next update needs a new batch


def test_replay_mixes_in_the_proportion_of_stored_rollouts():
    replay = ReplaySlots(num_slots=3, proportion=1.5, seed=0)
    sizes = [len(replay.mix_in(object(), i)) for i in range(400)]  # type: ignore[arg-type]
    assert sizes[0] == 1  # nothing stored yet
    assert len(replay.slots) == 3
    assert 2.3 < np.mean(sizes[1:]) < 2.7  # the new one plus 1.5 replayed on average


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (lambda: IMPALAConfig().training(replay_proportion=0.5), "replay_buffer_num_slots"),
        (lambda: IMPALAConfig().training(learner_queue_size=0), "learner_queue_size"),
        (lambda: IMPALAConfig().training(vtrace=False), "vtrace=True"),
        (lambda: IMPALAConfig().training(minibatch_size=1000), "minibatch_size"),
        (lambda: IMPALAConfig().training(model={"use_lstm": True}), "use_lstm"),
        (lambda: APPOConfig().training(use_critic=False), "use_critic"),
        (lambda: IMPALAConfig().training(opt_type="rmsprop"), "opt_type"),
        (lambda: IMPALAConfig().training(entropy_coeff=[[10, 0.01], [0, 0.0]]), "entropy_coeff"),
        (lambda: APPOConfig().offline_data(input_="/tmp/nothing-here/*.parquet"), "input_"),
    ],
)
def test_incompatible_settings_fail_at_build_naming_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        config().environment("CartPole-v1").validate()


def small(config_class=APPOConfig, **training):
    return (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=8, rollout_fragment_length=50)
        .training(**training)
        .reporting(min_time_s_per_iteration=0)
        .debugging(seed=0)
    )


@pytest.mark.parametrize("config_class", [IMPALAConfig, APPOConfig])
def test_driver_sampling_trains_and_reports(config_class):
    algo = small(config_class, minibatch_size=200, num_epochs=2, minibatch_buffer_size=2).build()
    try:
        for _ in range(3):
            result = algo.train()
        for key in config_class.STAT_KEYS:
            assert np.isfinite(result[key]), key
        # Every batch is trained on twice: the second time, the weights have moved on once.
        assert result["policy_lag_env_steps"] > 0
        assert (
            result["info"]["learner"]["default_policy"]["learner_stats"]["policy_loss"]
            == result["policy_loss"]
        )
    finally:
        algo.stop()


def test_appo_target_network_and_kl_coefficient_follow_their_settings():
    # One 400-step rollout per update: the target moves at the second update, not the first.
    freq = 600
    algo = small(
        APPOConfig, use_kl_loss=True, kl_coeff=0.5, target_network_update_freq=freq, train_batch_size=400
    ).build()
    try:
        learner = algo.learner_group.local_learner
        first = algo.train()
        assert first["num_target_updates"] == 0 and first["kl"] == 0  # the target is the start
        while algo.counters.num_env_steps_trained < freq:
            result = algo.train()
        assert result["num_target_updates"] == 1
        for target, online in zip(learner.target.parameters(), learner.module.parameters(), strict=True):
            torch.testing.assert_close(target, online)  # tau=1: a copy at the update
        # At each target update the coefficient moves as PPO's does: x1.5 above 2 * kl_target,
        # x0.5 below half of it, unchanged between.
        coeff = learner.kl_coeff
        for kl, factor in ((0.05, 1.5), (0.001, 0.5), (0.01, 1.0)):
            stats = {"kl": kl}
            learner.after_update(freq, stats)
            assert stats["cur_kl_coeff"] == pytest.approx(coeff * factor)
            coeff = learner.kl_coeff
        learner.after_update(10, stats := {"kl": 1.0})  # no target update: no change
        assert stats["cur_kl_coeff"] == coeff
    finally:
        algo.stop()


def test_appo_checkpoint_round_trip(tmp_path):
    algo = small(APPOConfig, use_kl_loss=True).build()
    try:
        algo.train()
        learner = algo.learner_group.local_learner
        learner.kl_coeff = 0.123
        path = algo.save(str(tmp_path / "ckpt"))
        weights = algo.get_policy().get_weights()
    finally:
        algo.stop()
    restored = APPO.from_checkpoint(path)
    try:
        assert restored.learner_group.local_learner.kl_coeff == 0.123
        for name, array in restored.get_policy().get_weights().items():
            np.testing.assert_array_equal(array, weights[name])
        learner = restored.learner_group.local_learner
        for target, online in zip(learner.target.parameters(), learner.module.parameters(), strict=True):
            torch.testing.assert_close(target, online)
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()


def remote(config_class=APPOConfig, runners=2, **training):
    return (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=8, rollout_fragment_length=50)
        .training(**training)
        .reporting(min_time_s_per_iteration=1)
        .debugging(seed=0)
    )


#: Env steps the remote runners may sample before CartPole's return must have reached 150.
LEARNING_BUDGET_STEPS = 300_000


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(
    "config_class",
    [
        # IMPALA's pipeline is APPO's (which learns here and in test_appo_learning.py) less the
        # clipped surrogate: its own V-trace is checked against hand computations above.
        pytest.param(IMPALAConfig, marks=pytest.mark.e2e_only("the APPO case and the V-trace tests")),
        APPOConfig,
    ],
)
def test_learns_cartpole_with_two_remote_runners(config_class):
    """A budget of env steps, not of seconds: on a busy machine the same learning takes longer
    (pytest's timeout is the last guard)."""
    algo = remote(config_class).build()
    try:
        best, lags, steps = 0.0, [], 0
        while steps < LEARNING_BUDGET_STEPS and best < 150:
            result = algo.train()
            best = max(best, result["episode_return_mean"])
            lags.append(result["policy_lag_env_steps"])
            steps = result["num_env_steps_sampled_lifetime"]
        assert best >= 150, f"{config_class.ALGORITHM} reached {best:.0f} in {steps} env steps"
        assert max(lags) > 0  # asynchronous: batches were sampled with older weights
        assert result["num_env_steps_trained_per_s"] > 0
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_a_straggling_runner_does_not_hold_the_learner_back():
    """Runner 2 takes 2.5 s per sample, runner 1 a few ms: the learner trains on runner 1's
    samples meanwhile. A synchronous algorithm would update once per 2.5 s; the check compares
    with that bound in the iteration's own time, not with a count that depends on the machine's
    speed (on a busy machine the fast runner is slower too)."""
    config = (
        APPOConfig()
        .environment(
            "tests.envs:SlowOnOneRunnerEnv", env_config={"length": 20, "delay_s": 0.05, "slow_worker": 2}
        )
        .env_runners(num_env_runners=2, num_envs_per_env_runner=1, rollout_fragment_length=50)
        .training(train_batch_size=100)
        .reporting(min_time_s_per_iteration=5)
    )
    algo = config.build()
    try:
        algo.workers.foreach_worker(lambda runner: runner.ping(), local_worker=False)  # both are up
        result = algo.train()
        # Each update needs 2 fragments; in lockstep each waits for runner 2's 2.5 s sample.
        lockstep_at_most = result["time_this_iter_s"] / 2.5 + 1
        updates = result["num_learner_updates"]
        assert updates > lockstep_at_most, (updates, result["time_this_iter_s"])
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_a_killed_runner_is_replaced_while_training_goes_on():
    config = remote(APPOConfig).fault_tolerance(
        restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0
    )
    algo = config.build()
    try:
        algo.train()
        kill_actor(algo.workers.remote_workers[0])
        during = algo.train()
        assert during["num_env_steps_trained"] > 0
        # The replacement is healthy once its process has started (imports: seconds on an idle
        # machine, much longer on a busy one): training goes on until then, a bounded number of
        # iterations (pytest's timeout is the last guard).
        for _ in range(300):
            after = algo.train()
            assert after["num_env_steps_trained"] > 0
            if after["num_healthy_env_runners"] == 2:
                break
        assert after["num_env_runner_restarts"] == 1
        assert after["num_healthy_env_runners"] == 2
        assert algo.workers.foreach_worker(lambda w: w.worker_index, local_worker=False) == [1, 2]
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_no_samples_within_the_learner_queue_timeout_is_a_clear_error():
    config = (
        IMPALAConfig()
        .environment("tests.envs:SlowEnv", env_config={"delay_s": 5.0})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1, rollout_fragment_length=10)
        .training(learner_queue_timeout=1.0)
        .reporting(min_time_s_per_iteration=0)
    )
    algo = config.build()
    try:
        started = time.monotonic()
        with pytest.raises(WorkerError, match="learner_queue_timeout=1"):
            algo.train()
        assert time.monotonic() - started < 10
    finally:
        algo.stop()


def test_on_learn_on_batch_sees_whole_trajectories():
    from rltrainer.algorithms.callbacks import DefaultCallbacks

    class Trajectories(DefaultCallbacks):
        def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):  # noqa: ARG002
            result["trajectories"] = train_batch["valid"].shape[0]
            result["steps_per_trajectory"] = train_batch["valid"].shape[1]
            train_batch["rewards"] = train_batch["rewards"] * 0.0  # rewrites reach the loss

    algo = small(IMPALAConfig).callbacks(Trajectories).build()
    try:
        result = algo.train()
        assert result["trajectories"] >= 8 and result["steps_per_trajectory"] >= 50
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_two_ddp_learners_hold_identical_weights_and_target_networks():
    config = (
        remote(APPOConfig, runners=1)
        .resources(num_learners=2)
        .training(minibatch_size=200)
        .reporting(min_time_s_per_iteration=0)  # one update per iteration
    )
    algo = config.build()
    try:
        for _ in range(2):
            result = algo.train()
        assert result["num_learner_updates"] >= 2

        def state(learner):
            online = {k: v.numpy() for k, v in learner.get_weights().items()}
            return online, [p.detach().cpu().numpy().copy() for p in learner.target.parameters()]

        (first, first_target), (second, second_target) = algo.learner_group.foreach_learner(state)
        for name, array in first.items():
            np.testing.assert_array_equal(array, second[name])
        for a, b in zip(first_target, second_target, strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        algo.stop()
