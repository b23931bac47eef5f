"""Curriculum learning and coordinating envs: ``TaskSettableEnv``, ``env_task_fn``,
``foreach_env_with_context``, and envs reading a named Ray actor, in local and remote runners."""

from __future__ import annotations

import json
import time

import pytest
import ray

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env import EnvContext, TaskSettableEnv
from rltrainer.env.apis.task_settable_env import TaskSettableEnv as RLlibPathTaskSettableEnv
from rltrainer.env.env_runner import EnvRunner
from rltrainer.env.registry import RestartOnCrash
from rltrainer.errors import ConfigError
from tests import envs


def config(tmp_path, **environment) -> PPOConfig:
    """PPO on ``LevelEnv`` with tiny batches: 2 envs x 10 steps per runner and round."""
    return (
        PPOConfig()
        .environment(envs.LevelEnv, **environment)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=10)
        .training(train_batch_size=20, minibatch_size=20, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


def tasks_with_context(algo) -> list[list[tuple[int, int, int]]]:
    """(worker_index, vector_index, task) of every sub-env, one list per runner (local first)."""
    return algo.workers.foreach_env_with_context(
        lambda env, ctx: (ctx.worker_index, ctx.vector_index, env.get_task())
    )


# --- the API ------------------------------------------------------------------------------
def test_task_settable_env_is_rllibs_interface():
    assert TaskSettableEnv is RLlibPathTaskSettableEnv
    env = TaskSettableEnv()
    for call in (env.get_task, lambda: env.set_task(1), lambda: env.sample_tasks(2)):
        with pytest.raises(NotImplementedError):
            call()


def test_env_task_fn_round_trips_as_a_module_path(tmp_path):
    data = config(tmp_path, env_task_fn=envs.level_by_timesteps).to_dict()
    assert data["env_task_fn"] == "tests.envs:level_by_timesteps"
    restored = PPOConfig.from_dict(json.loads(json.dumps(data)))
    assert restored.env_task_fn == "tests.envs:level_by_timesteps"  # imported when built
    assert restored.to_dict() == data
    algo = restored.build()
    try:
        algo.train()
        assert algo.workers.foreach_env(lambda env: env.get_task()) == [[2 + 20 // 40] * 2]
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (3, "must be a function"),
        ("no_colon", "must be a function"),
        ("tests.envs:", "must be a function"),
    ],
)
def test_env_task_fn_rejects_what_is_not_a_function(value, match):
    with pytest.raises(ConfigError, match=f"'env_task_fn'.*{match}"):
        PPOConfig().environment("CartPole-v1", env_task_fn=value)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("tests.no_such_module:fn", "cannot import module 'tests.no_such_module'"),
        ("tests.envs:no_such_fn", "has no attribute 'no_such_fn'"),
        ("tests.envs:RECORDED_ACTIONS", "is a list, not a function"),
        ("tests.test_curriculum:<lambda>", "lambda, a nested function"),
    ],
)
def test_env_task_fn_name_that_cannot_be_imported_fails_at_build(tmp_path, name, match):
    with pytest.raises(ConfigError, match=match):
        config(tmp_path, env_task_fn=name).build()


def test_lambda_is_written_by_name_and_fails_to_build_from_it_with_a_pointer(tmp_path):
    data = config(tmp_path, env_task_fn=lambda _result, _env, _ctx: 1).to_dict()
    assert data["env_task_fn"].startswith("tests.test_curriculum:")
    assert data["env_task_fn"].endswith(".<locals>.<lambda>")
    with pytest.raises(ConfigError, match="config_overrides"):
        PPOConfig.from_dict(data).build()


@pytest.mark.parametrize(
    ("env", "creates"),
    [
        ("CartPole-v1", "CartPoleVectorEnv.*one batched env"),  # gymnasium's vector entry point
        ("Pendulum-v1", "PendulumEnv"),  # a SyncVectorEnv of wrapped gymnasium envs
        (envs.FixedLengthEnv, "FixedLengthEnv"),
    ],
)
def test_env_task_fn_on_an_env_without_tasks_is_a_config_error_at_build(tmp_path, env, creates):
    cfg = config(tmp_path, env_task_fn=envs.level_by_timesteps).environment(env)
    with pytest.raises(ConfigError, match=f"needs envs that are.*TaskSettableEnv.*creates {creates}"):
        cfg.build()


# --- local runner ---------------------------------------------------------------------------
def test_foreach_env_with_context_gives_each_sub_env_its_context(tmp_path):
    cfg = config(tmp_path, env_config={"level": 4}).fault_tolerance(restart_failed_sub_environments=True)
    runner = EnvRunner(cfg, worker_index=3, num_workers=5)
    try:
        assert all(isinstance(env, RestartOnCrash) for env in runner.env.envs)  # internal: not shown
        contexts = runner.foreach_env_with_context(lambda env, ctx: (type(env), ctx))
        assert [env for env, _ in contexts] == [envs.LevelEnv, envs.LevelEnv]
        for index, (_, ctx) in enumerate(contexts):
            assert isinstance(ctx, EnvContext)
            assert (ctx.worker_index, ctx.vector_index, ctx.num_workers) == (3, index, 5)
            assert ctx == {"level": 4}
        assert runner.foreach_env(type) == [envs.LevelEnv, envs.LevelEnv]
    finally:
        runner.stop()


def test_curriculum_advances_in_the_local_runner(tmp_path):
    algo = config(tmp_path, env_task_fn=envs.level_by_timesteps).build()
    try:
        for _ in range(3):
            result = algo.train()
            level = envs.level_by_timesteps(result, None, None)
            assert tasks_with_context(algo) == [[(0, 0, level), (0, 1, level)]]
        # The new levels were played: each env's episodes started on levels 1 (the env's own), 2, 3.
        for played in algo.workers.foreach_env(lambda env: env.levels_played)[0]:
            assert played == sorted(played)
            assert {1, 2, 3} <= set(played)
    finally:
        algo.stop()


def test_a_recreated_env_keeps_its_task():
    def make():
        return envs.LevelEnv({"crash_at_step": 3})

    env = RestartOnCrash(make(), make)
    env.env.set_task(5)
    env.reset(seed=0)
    for _ in range(3):
        *_, info = env.step(1)
    assert info[RestartOnCrash.CRASHED]
    assert env.env.get_task() == 5
    assert env.env.levels_played == [5]  # the new env object's first episode


def test_envs_recreated_by_their_runner_keep_their_tasks(tmp_path):
    runner = EnvRunner(config(tmp_path))
    try:
        runner.set_env_tasks([6, 7])
        runner._recreate_envs()  # what sample() does when an env's reset() raises
        assert runner.foreach_env(lambda env: env.get_task()) == [6, 7]
    finally:
        runner.stop()


# --- remote runners ---------------------------------------------------------------------
def first_levels(algo, worker_index: int) -> list[int]:
    """The level each env of a runner started its first episode on."""
    return [played[0] for played in algo.workers.foreach_env(lambda env: env.levels_played)[worker_index]]


@pytest.mark.usefixtures("local_ray")
def test_curriculum_in_remote_runners_and_their_replacements(tmp_path):
    """Levels follow ``timesteps_total`` (+ the vector index); remote runner 1 exits while its
    tasks are set after iteration 2 (``env_ctx.worker_index`` picks it), runner 2 is killed
    before iteration 4: each replacement starts on the level the others are on."""
    algo = (
        config(tmp_path, env_task_fn=envs.curriculum_ending_runner_1)
        .env_runners(num_env_runners=2)
        .training(train_batch_size=40, minibatch_size=40)
        # Each replacement's probe waits for it (its start takes seconds idle, minutes on a busy
        # machine), so that it samples in the iteration the test reads.
        .fault_tolerance(delay_between_env_runner_restarts_s=0, env_runner_health_probe_timeout_s=600)
        .build()
    )

    def levels(result: dict) -> list[int]:
        return [2 + result["timesteps_total"] // 40 + vector_index for vector_index in (0, 1)]

    try:
        result = algo.train()
        assert tasks_with_context(algo) == [[(w, v, levels(result)[v]) for v in (0, 1)] for w in (0, 1, 2)]
        after_first = levels(result)
        result = algo.train()  # remote envs play iteration 1's levels, then runner 1 exits
        assert algo.workers.healthy_env_runner_ids() == [2]
        runner_2 = algo.workers.foreach_env(lambda env: env.levels_played)[1]
        for vector_index, played in enumerate(runner_2):
            assert played == sorted(played)
            assert (played[0], played[-1]) == (1, after_first[vector_index])  # 1: the env's own level
        assert tasks_with_context(algo) == [[(w, v, levels(result)[v]) for v in (0, 1)] for w in (0, 2)]

        current = levels(result)
        result = algo.train()  # runner 1's replacement: its predecessor's tasks, then the call it missed
        assert result["num_env_runner_restarts"] == 1
        assert first_levels(algo, 1) == current

        current = levels(result)
        victim = algo.workers.remote_workers[1]
        ray.kill(victim)
        deadline = time.monotonic() + 30
        with pytest.raises(ray.exceptions.RayActorError):  # ray.kill is asynchronous: a ping may
            while time.monotonic() < deadline:  # still be answered right after it (seen in CI)
                ray.get(victim.ping.remote())
                time.sleep(0.05)
        result = algo.train()  # runner 2's sample is lost; its replacement samples the next round
        assert result["num_env_runner_restarts"] == 2
        assert first_levels(algo, 2) == current  # its predecessor's levels, not 1
        assert tasks_with_context(algo) == [[(w, v, levels(result)[v]) for v in (0, 1)] for w in (0, 1, 2)]
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_envs_in_remote_runners_read_a_named_actor(tmp_path):
    """RLlib's "global coordination" pattern: envs look up a named actor the driver created."""
    coordinator = ray.remote(envs.Coordinator).options(name="test_coordinator", num_cpus=0).remote()
    cfg = config(tmp_path).environment(envs.CoordinatedEnv, env_config={"coordinator": "test_coordinator"})
    # The env check at build() would start one episode in the driver's env (the coordinator
    # counts it); this test counts the episodes the runners sample.
    cfg.environment(disable_env_checking=True)
    algo = cfg.env_runners(num_env_runners=1).build()  # its envs live in a process of their own
    try:
        ray.get(coordinator.set_level.remote(3))
        algo.train()
        ray.get(coordinator.set_level.remote(5))
        algo.train()
        played = algo.workers.foreach_env(lambda env: env.levels_played)
        assert played[0] == [[], []]  # the driver's runner does not sample when there are remote ones
        remote = [levels for runner in played[1:] for levels in runner]
        assert all(levels[0] == 3 and levels[-1] == 5 for levels in remote)
        assert ray.get(coordinator.num_episodes.remote()) == sum(len(levels) for levels in remote)
    finally:
        algo.stop()
        ray.kill(coordinator)
