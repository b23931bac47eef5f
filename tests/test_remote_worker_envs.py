"""``remote_worker_envs=True``: each sub-env of an env runner in a Ray actor of its own, stepped in
parallel (``rltrainer.env.remote_vector_env``), with what local sub-envs give."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env import EnvContext, make_vector_env, register_env
from rltrainer.env.multi_agent_examples import MultiAgentCartPole
from rltrainer.env.remote_vector_env import RemoteVectorEnv
from rltrainer.errors import ConfigError, EnvError
from tests import envs
from tests.ray_clusters import kill_actor, wait_until_dead

pytestmark = pytest.mark.usefixtures("local_ray")

# CartPole made by a registered creator: copies in a SyncVectorEnv locally (a gymnasium id alone
# would be CartPole's natively batched env), and the creator has to reach the actors.
register_env("cartpole_copies", envs.cartpole_copy)
register_env("two_cartpoles", lambda ctx: MultiAgentCartPole({"num_agents": 2, **ctx}))


def tiny_config(tmp_path, env, num_envs: int = 2, **env_runners) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=num_envs, remote_worker_envs=True, **env_runners)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


def test_remote_sub_envs_sample_and_train_exactly_as_local_ones(tmp_path):
    def two_iterations(remote: bool) -> tuple[list[dict], dict, tuple]:
        config = (
            tiny_config(tmp_path, "cartpole_copies", num_envs=2)
            .env_runners(remote_worker_envs=remote)
            .training(train_batch_size=128, minibatch_size=64, num_epochs=2)
            .debugging(seed=7)
        )
        algo = config.build()
        try:
            runner = algo.workers.local_worker()
            assert isinstance(runner.env, RemoteVectorEnv) == remote
            results = [algo.train() for _ in range(2)]
            weights = {k: np.asarray(v) for k, v in algo.learner_group.get_weights().items()}
            rollout, _ = runner.sample()
            return results, weights, (rollout.obs, rollout.rewards, rollout.terminateds, rollout.valid)
        finally:
            algo.stop()

    local_results, local_weights, local_rollout = two_iterations(remote=False)
    remote_results, remote_weights, remote_rollout = two_iterations(remote=True)
    for local, remote in zip(local_results, remote_results, strict=True):
        assert remote["hist_stats"] == local["hist_stats"]  # every episode's return and length
        assert remote["num_env_steps_sampled"] == local["num_env_steps_sampled"]
        assert remote["policy_loss"] == local["policy_loss"]
    assert local_results[1]["episodes_this_iter"] > 0
    assert remote_weights.keys() == local_weights.keys()
    for name, value in local_weights.items():
        np.testing.assert_array_equal(remote_weights[name], value)
    for remote, local in zip(remote_rollout, local_rollout, strict=True):
        np.testing.assert_array_equal(remote, local)


def test_slow_sub_envs_step_in_parallel_in_their_own_processes_and_stop_with_the_algorithm(tmp_path):
    config = tiny_config(tmp_path, "tests.envs:SlowStepEnv", num_envs=4, rollout_fragment_length=40)
    algo = config.training(train_batch_size=160).build()
    try:
        env = algo.workers.local_worker().env
        pids = env.get_attr("pid")
        assert len(set(pids)) == 4 and os.getpid() not in pids
        actors = list(env.actors)
        rollout, _ = algo.workers.local_worker().sample()
        assert rollout.num_steps == 160
        # In parallel: the envs' steps overlap in time (one SyncVectorEnv steps the 4 envs one
        # after the other, so none would); by the clock of the steps, not the machine's speed.
        steps = [interval for times in env.get_attr("step_times") for interval in times]
        overlapping = sum(
            1 for i, (start, end) in enumerate(steps) for other_start, other_end in steps[i + 1 :]
            if start < other_end and other_start < end
        )  # fmt: skip
        assert overlapping >= 40, f"{overlapping} overlapping pairs among {len(steps)} steps of 4 envs"
    finally:
        algo.stop()
    assert env.closed
    for actor in actors:
        wait_until_dead(actor)


def test_failing_remote_env_names_the_error_as_a_local_one(tmp_path):
    # Each actor counts its own steps: both envs raise at their third step.
    algo = tiny_config(tmp_path, "tests.envs:FailingEnv").environment(env_config={"fail_every": 3}).build()
    try:
        expected = (
            r"^env 'tests.envs:FailingEnv': step\(\) raised RuntimeError: simulated env crash "
            r"\(at .*envs.py:\d+ in step\)$"
        )
        with pytest.raises(EnvError, match=expected):
            algo.train()
    finally:
        algo.stop()


def test_failed_remote_sub_env_is_recreated_in_its_actor_and_its_episode_dropped(tmp_path):
    # 10-step episodes in 2 envs; each actor's env crashes every 25 of its steps.
    config = tiny_config(tmp_path, "tests.envs:FailingEnv").environment(env_config={"fail_every": 25})
    algo = config.fault_tolerance(restart_failed_sub_environments=True).build()
    try:
        runner = algo.workers.local_worker()
        env, actors = runner.env, list(runner.env.actors)
        results = [algo.train() for _ in range(4)]
        assert sum(env.get_attr("calls")) >= 4 * 25  # several crashes happened
        assert runner.env is env and env.actors == actors  # recreated inside the same actors
        # Every reported episode is a whole one: crashed episodes are dropped, not cut short.
        assert all(r["episode_len_mean"] == 10 for r in results)
        assert all(r["num_env_steps_sampled"] >= 64 for r in results)
        # An actor that dies takes its runner's sub-envs with it: they are all made again.
        kill_actor(actors[1])
        assert algo.train()["num_env_steps_sampled"] >= 64
        assert runner.env is not env and len(runner.env.actors) == 2
    finally:
        algo.stop()
    for actor in actors:
        wait_until_dead(actor)


def test_remote_vector_env_api_and_a_dead_actor():
    env = make_vector_env("tests.envs:FixedLengthEnv", EnvContext({"length": 2}), 2, remote=True)
    try:
        assert not hasattr(env, "envs") and len(env.actors) == 2
        assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        assert env.observation_space.shape == (2, 3) and env.action_space.shape == (2,)
        local = make_vector_env("tests.envs:FixedLengthEnv", EnvContext({"length": 2}), 2)
        obs, _ = env.reset(seed=[5, None])
        np.testing.assert_array_equal(obs[0], local.reset(seed=5)[0][0])
        env.set_attr("length", [1, 3])
        assert env.get_attr("length") == (1, 3)
        steps = [env.step(np.array([1, 1])) for _ in range(3)]
        # Next-step autoreset: env 0 ends at its first step and resets at the second (reward 0).
        assert [s[2][0] for s in steps] == [True, False, True]
        assert [s[1][0] for s in steps] == [1.0, 0.0, 1.0]
        kill_actor(env.actors[1])
        with pytest.raises(EnvError, match=r"sub-env 1 \(remote_worker_envs\) failed in step\(\): Actor"):
            env.step(np.array([1, 1]))
    finally:
        env.close()
        env.close()  # idempotent


class SeesSubEnvs(DefaultCallbacks):
    def on_sub_environment_created(self, *, worker, sub_environment, env_context, env_index, **kwargs):
        pass


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            lambda c: c.environment("tests.envs:LevelEnv", env_task_fn="tests.envs:level_by_timesteps"),
            r"env_task_fn .* remote_worker_envs=True",
        ),
        (lambda c: c.environment(MultiAgentCartPole), "remote_worker_envs .* single-agent"),
        (lambda c: c.environment("two_cartpoles"), "remote_worker_envs .* single-agent"),  # found in an actor
        (lambda c: c.callbacks(SeesSubEnvs), r"on_sub_environment_created .* remote_worker_envs=True"),
    ],
    ids=["env_task_fn", "multi-agent", "registered-multi-agent", "on_sub_environment_created"],
)
def test_what_remote_sub_envs_cannot_do_is_refused(tmp_path, change, match):
    with pytest.raises(ConfigError, match=match):
        change(tiny_config(tmp_path, "tests.envs:FixedLengthEnv")).build()


def test_invalid_value_and_round_trip():
    with pytest.raises(ConfigError, match=r"invalid value for 'remote_worker_envs'.*'yes'"):
        PPOConfig().env_runners(remote_worker_envs="yes")
    config = PPOConfig().env_runners(remote_worker_envs=True)
    assert config.to_dict()["remote_worker_envs"] is True
    assert PPOConfig.from_dict(config.to_dict()).remote_worker_envs is True


def test_one_env_per_runner_ignores_remote_worker_envs(tmp_path):
    algo = tiny_config(tmp_path, "tests.envs:FixedLengthEnv", num_envs=1).build()
    try:
        assert not isinstance(algo.workers.local_worker().env, RemoteVectorEnv)  # as RLlib
    finally:
        algo.stop()


def test_remote_env_runner_with_remote_sub_envs(tmp_path):
    algo = tiny_config(tmp_path, "tests.envs:SlowStepEnv", num_env_runners=1).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 64
        # The remote runner's sub-envs: actors of its own, in processes other than its.
        remote = algo.workers.foreach_worker(
            lambda r: (os.getpid(), r.env.get_attr("pid"), r.env.actors), local_worker=False
        )
        ((runner_pid, pids, actors),) = remote
        assert len(set(pids)) == 2 and runner_pid not in pids and os.getpid() not in pids
    finally:
        algo.stop()
    for actor in actors:  # its runner's stop() closed them
        wait_until_dead(actor)
