"""EnvRunner internals that the end-to-end tests only see in aggregate."""

from __future__ import annotations

import numpy as np
import pytest

from rltrainer.algorithms.ddpg import TD3Config
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.core import compiled
from rltrainer.env.env_runner import EnvRunner


def per_step_episodes(rewards, valid, dones, carry_return, carry_len):
    """The reference: walk the steps one at a time."""
    running_return, running_len = carry_return.copy(), carry_len.copy()
    ended = []
    for t in range(len(rewards)):
        running_return += np.where(valid[t], rewards[t], 0.0)
        running_len += valid[t]
        for env in np.flatnonzero(dones[t]):
            if valid[t, env]:
                ended.append((int(env), float(running_return[env]), int(running_len[env])))
            running_return[env], running_len[env] = 0.0, 0
    return ended, running_return, running_len


@pytest.mark.parametrize("compiled_kernels", [True, False], ids=["numba", "numpy"])
def test_episode_accounting_per_rollout_matches_a_step_by_step_walk(tmp_path, monkeypatch, compiled_kernels):
    # Both implementations: the compiled walk and numpy's cumulative sums.
    monkeypatch.setattr(compiled, "MIN_BATCH", 1 if compiled_kernels else 10**9)
    config = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=5)
    runner = EnvRunner(config.reporting(storage_path=str(tmp_path)))
    rng = np.random.default_rng(0)
    carry_return, carry_len = np.zeros(5), np.zeros(5, dtype=np.int64)
    for steps in (7, 1, 30, 1, 12):  # several rollouts (and single steps, as evaluation does)
        rewards = rng.normal(size=(steps, 5)).astype(np.float32)
        valid = rng.random((steps, 5)) < 0.8  # invalid: reset steps, crashed or frozen envs
        dones = rng.random((steps, 5)) < 0.2  # invalid done steps close their episode unreported
        expected, carry_return, carry_len = per_step_episodes(rewards, valid, dones, carry_return, carry_len)
        ended = runner._close_episodes(rewards, valid, dones)
        assert [env for env, _ in ended] == [env for env, _, _ in expected]
        returns = [e.episode_return for _, e in ended]
        np.testing.assert_allclose(returns, [r for _, r, _ in expected], rtol=1e-6)
        assert [e.episode_len for _, e in ended] == [n for _, _, n in expected]
        np.testing.assert_allclose(runner._ep_return, carry_return, rtol=1e-6)
        np.testing.assert_array_equal(runner._ep_len, carry_len)
    runner.stop()


def test_rollout_episode_stats_are_the_envs_true_returns(tmp_path):
    # CartPole pays 1 per step: every completed episode's return equals its length.
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=50)
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    runner = EnvRunner(config)
    episodes, valid_steps = [], 0
    for _ in range(6):
        rollout, completed = runner.sample()
        episodes += completed
        valid_steps += rollout.num_steps
        assert (rollout.valid.sum(axis=0) >= 50).all()
    assert len(episodes) > 10
    assert all(e.episode_return == e.episode_len and e.episode_len > 0 for e in episodes)
    # Every valid step belongs to exactly one episode: a completed one or one still running.
    assert sum(e.episode_len for e in episodes) + runner._ep_len.sum() == valid_steps
    runner.stop()


def test_sampling_runs_with_the_runners_torch_threads_and_puts_the_drivers_back(tmp_path):
    import torch

    seen = []
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=4)
        .resources(num_cpus_per_env_runner=1)
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    runner = EnvRunner(config)
    step = runner._step
    runner._step = lambda *args: seen.append(torch.get_num_threads()) or step(*args)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runner.sample()
        assert set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
        runner.stop()


@pytest.mark.parametrize(
    ("env", "num_envs", "compiled_kernels"),
    [("Pendulum-v1", 1, False), ("CartPole-v1", 3, False), ("CartPole-v1", 3, True)],
    ids=["pendulum", "cartpole-3-envs", "cartpole-3-envs-numba"],
)
def test_one_step_fragments_are_the_general_loops(tmp_path, monkeypatch, env, num_envs, compiled_kernels):
    import torch

    # _one_step_rollout (a one-step fragment valid in every env) against _rollout's loop: the same
    # columns, episodes and running sums, through episode ends (reset steps take the loop).
    monkeypatch.setattr(compiled, "MIN_BATCH", 1 if compiled_kernels else 10**9)
    config_class = TD3Config if env == "Pendulum-v1" else PPOConfig
    config = (
        config_class()
        .environment(env)
        .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=1)
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=3)
    )
    if env == "Pendulum-v1":
        noise = {"type": "GaussianNoise", "random_timesteps": 100, "stddev": 0.1}
        config.exploration(exploration_config=noise)

    def sample(lean: bool):
        torch.manual_seed(0)  # the same initial policy for both (the driver's runner draws from torch's)
        runner = EnvRunner(config)
        if not lean:
            runner._fragment = lambda steps, explore, complete: runner._rollout(steps, explore, complete)
        calls = [None]
        if lean:
            one_step = runner._one_step_rollout
            runner._one_step_rollout = lambda explore: calls.append(1) or one_step(explore)
        samples = [runner.sample() for _ in range(450)]
        state = (runner._ep_return.copy(), runner._ep_len.copy())
        runner.stop()
        return samples, state, len(calls) - 1

    (lean, lean_state, lean_calls), (general, general_state, _) = sample(True), sample(False)
    assert lean_calls > 400  # (the first fragment resets the envs in the loop)
    assert sum(len(episodes) for _, episodes in lean) >= 2
    for (rollout, episodes), (expected, expected_episodes) in zip(lean, general, strict=True):
        assert episodes == expected_episodes
        for name in ("obs", "actions", "action_logp", "rewards", "terminateds", "truncateds", "valid"):
            column, expected_column = getattr(rollout, name), getattr(expected, name)
            assert column.dtype == expected_column.dtype and column.shape == expected_column.shape, name
            np.testing.assert_array_equal(column, expected_column, err_msg=name)
        np.testing.assert_array_equal(rollout.last_obs, expected.last_obs)
    for value, expected_value in zip(lean_state, general_state, strict=True):
        np.testing.assert_array_equal(value, expected_value)
