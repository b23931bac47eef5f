"""Distributed execution on a real local multi-node Ray cluster.

Three raylets on this machine: a head node, a "learner" node advertising
``rltrainer_learner`` and a "rollout" node advertising ``rltrainer_rollout``, the
convention the operator's KubeRay worker groups follow.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray
import torch
import yaml
from ray.cluster_utils import Cluster

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.env import register_env
from rltrainer.errors import ConfigError, ResourceError, WorkerError
from tests.ray_clusters import checkout_on_pythonpath, kill_actor

ROOT = Path(__file__).resolve().parent.parent
LEARNER = {"rltrainer_learner": 1}
ROLLOUT = {"rltrainer_rollout": 1}


@pytest.fixture(scope="module")
def cluster():
    """Head: 1 CPU; learner node (2 CPUs, 2 rltrainer_learner); rollout node (2 CPUs, 4 rltrainer_rollout)."""
    with checkout_on_pythonpath():
        local = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        learner_node = local.add_node(num_cpus=2, resources={"rltrainer_learner": 2})
        rollout_node = local.add_node(num_cpus=2, resources={"rltrainer_rollout": 4})
    local.wait_for_nodes()
    ray.init(address=local.address)
    yield {"learner": learner_node.node_id, "rollout": rollout_node.node_id}
    ray.shutdown()
    local.shutdown()


def tuned_config(tmp_path: Path) -> PPOConfig:
    spec = yaml.safe_load((ROOT / "tuned_examples" / "ppo_cartpole.yaml").read_text())["cartpole-ppo"]
    config = PPOConfig().environment(spec["env"]).update_from_dict(spec["config"])
    return config.reporting(storage_path=str(tmp_path)).debugging(seed=0)


def node_of_current_process(*_args) -> str:
    return ray.get_runtime_context().get_node_id()


def train_until(algo: Algorithm, target: float, max_iterations: int) -> float:
    best = float("-inf")
    for _ in range(max_iterations):
        result = algo.train()
        best = max(best, result["episode_return_mean"])
        if best >= target:
            break
    return best


def test_default_resource_request_lists_every_bundle():
    config = (
        PPOConfig()
        .resources(
            num_learners=2,
            num_gpus_per_learner=0.5,
            custom_resources_per_learner=LEARNER,
            custom_resources_per_env_runner=ROLLOUT,
            placement_strategy="SPREAD",
        )
        .env_runners(num_env_runners=3)
    )
    request = PPO.default_resource_request(config)
    assert request.bundles == [
        {"CPU": 1.0},
        {"CPU": 1.0, "GPU": 0.5, "rltrainer_learner": 1.0},
        {"CPU": 1.0, "GPU": 0.5, "rltrainer_learner": 1.0},
        {"CPU": 1.0, "rltrainer_rollout": 1.0},
        {"CPU": 1.0, "rltrainer_rollout": 1.0},
        {"CPU": 1.0, "rltrainer_rollout": 1.0},
    ]
    assert request.strategy == "SPREAD"


def test_actors_and_bundles_land_on_their_nodes(cluster, tmp_path):
    config = (
        tuned_config(tmp_path)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
        .resources(
            num_learners=1, custom_resources_per_learner=LEARNER, custom_resources_per_env_runner=ROLLOUT
        )
    )
    algo = config.build()
    try:
        # The actors took their policy class from the registry, not from the algorithm's module,
        # which would have imported Ray Tune (0.7 s of each actor's start). Asked first, with a
        # lambda (sent by value): a function of this module would import it, and Tune with it.
        imports_tune = lambda *_: bool({"ray.tune", "rltrainer.algorithms.algorithm"} & set(sys.modules))  # noqa: E731
        assert algo.workers.foreach_worker(imports_tune, local_worker=False) == [False] * 2
        assert algo.learner_group.foreach_learner(imports_tune) == [False]
        table = ray.util.placement_group_table(algo._placement.group)
        # No bundle for the driver (this process): one learner bundle, then two env-runner ones.
        bundle_nodes = [table["bundles_to_node_id"][i] for i in range(len(table["bundles"]))]
        assert bundle_nodes == [cluster["learner"]] + [cluster["rollout"]] * 2
        assert (
            algo.workers.foreach_worker(node_of_current_process, local_worker=False)
            == [cluster["rollout"]] * 2
        )
        assert algo.learner_group.foreach_learner(node_of_current_process) == [cluster["learner"]]
        assert algo.train()["timesteps_total"] > 0
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_ppo_with_two_env_runners_learns_cartpole(tmp_path):
    config = tuned_config(tmp_path).env_runners(num_env_runners=2, num_envs_per_env_runner=4)
    config.resources(custom_resources_per_env_runner=ROLLOUT)
    algo = config.build()
    try:
        assert train_until(algo, target=200, max_iterations=200) >= 200
        # One value per worker: the local runner and both actors.
        assert algo.workers.foreach_worker_with_index(lambda w, i: (w.worker_index, i)) == [
            (0, 0),
            (1, 1),
            (2, 2),
        ]
        assert [len(envs) for envs in algo.workers.foreach_env(lambda env: env.num_envs)] == [1, 1, 1]
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_two_ddp_learners_stay_identical_and_learn(tmp_path):
    config = tuned_config(tmp_path).resources(num_learners=2, custom_resources_per_learner=LEARNER)
    algo = config.build()
    try:
        assert train_until(algo, target=100, max_iterations=150) >= 100
        weights = algo.learner_group.foreach_learner(lambda learner: learner.get_weights())
        assert len(weights) == 2
        mirror = algo.learner_group.get_weights()
        for name, tensor in weights[0].items():
            assert torch.equal(tensor, weights[1][name]), name
            assert torch.equal(tensor, mirror[name]), name
        policy = algo.get_policy().get_weights()
        np.testing.assert_array_equal(policy["pi.0.weight"], weights[0]["pi.0.weight"].numpy())
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_checkpoint_round_trip_with_remote_learner(tmp_path):
    config = tuned_config(tmp_path).resources(num_learners=1, custom_resources_per_learner=LEARNER)
    algo = config.build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "checkpoint"))
        obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
        expected = algo.compute_single_action(obs, explore=False)
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)  # the config brings num_learners=1 back
    try:
        assert restored.counters.training_iteration == 1
        assert restored.compute_single_action(obs, explore=False) == expected
        assert restored.learner_group.foreach_learner(lambda lrn: int(lrn.optimizer.step_count))[0] > 0
    finally:
        restored.stop()


@pytest.mark.usefixtures("cluster")
def test_unsatisfiable_placement_fails_fast_with_what_was_asked(tmp_path):
    config = (
        tuned_config(tmp_path)
        .env_runners(num_env_runners=1)
        .resources(custom_resources_per_env_runner={"rltrainer_gpu_node": 1}, placement_timeout_s=2)
    )
    started = time.monotonic()
    with pytest.raises(
        ResourceError, match=r"requested 1 bundles .*rltrainer_gpu_node.*the cluster has .*rltrainer_rollout"
    ):
        config.build()
    assert time.monotonic() - started < 15
    assert all(pg["state"] != "CREATED" for pg in ray.util.placement_group_table().values())


@pytest.mark.usefixtures("cluster")
def test_registered_env_reaches_remote_runners(tmp_path):
    register_env(
        "remote_short_cartpole",
        lambda ctx: __import__("gymnasium").make("CartPole-v1", max_episode_steps=ctx["steps"]),
    )
    config = (
        tuned_config(tmp_path)
        .environment("remote_short_cartpole", env_config={"steps": 20})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .resources(custom_resources_per_env_runner=ROLLOUT)
    )
    algo = config.build()
    try:
        assert algo.train()["episode_len_mean"] <= 20
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_dead_env_runner_gives_a_clear_error(tmp_path):
    config = (
        tuned_config(tmp_path)
        .env_runners(num_env_runners=2)
        .resources(custom_resources_per_env_runner=ROLLOUT)
        .fault_tolerance(restart_failed_env_runners=False)
    )
    algo = config.build()
    try:
        kill_actor(algo.workers.remote_workers[1])
        with pytest.raises(WorkerError, match=r"env runner\(s\) \[2\] died"):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_slow_env_runner_times_out_instead_of_hanging(tmp_path):
    config = (
        tuned_config(tmp_path)
        .environment("tests.envs:SlowEnv", env_config={"delay_s": 0.5})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1, sample_timeout_s=1.0)
        .resources(custom_resources_per_env_runner=ROLLOUT)
        .fault_tolerance(restart_failed_env_runners=False)
    )
    algo = config.build()
    try:
        started = time.monotonic()
        with pytest.raises(
            WorkerError, match=r"env runner\(s\) \[1\] did not finish sample within sample_timeout_s=1.0"
        ):
            algo.train()
        assert time.monotonic() - started < 10
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_env_runner_start_up_counts_against_no_sampling_or_probe_timeout(tmp_path):
    """Remote runners that take longer to start (minutes on a busy machine: torch's import, the
    envs' build) than ``sample_timeout_s`` and the health probe allow are waited for at build and
    after a restart: never counted as silent samplers, never killed and started again."""
    config = (
        tuned_config(tmp_path)
        .environment("tests.envs:SlowStartEnv", env_config={"start_delay_s": 3.0})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=1, sample_timeout_s=2.0)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1)
        .resources(custom_resources_per_env_runner=ROLLOUT)
        .fault_tolerance(delay_between_env_runner_restarts_s=0, env_runner_health_probe_timeout_s=0.5)
    )
    algo = config.build()
    try:
        assert algo.train()["num_env_runner_restarts"] == 0
        sigkill_env_runner(algo, 0)
        during = algo.train()  # runner 2 samples while the replacement starts
        assert during["num_env_steps_sampled"] > 0
        algo.workers.probe_unhealthy_env_runners(timeout_seconds=600)
        after = algo.train()
        assert (after["num_env_runner_restarts"], after["num_healthy_env_runners"]) == (1, 2)
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_env_runner_that_does_not_start_in_time_is_named(tmp_path):
    config = (
        tuned_config(tmp_path)
        .environment("tests.envs:SlowStartEnv", env_config={"start_delay_s": 120.0})
        .env_runners(num_env_runners=1)
        .resources(custom_resources_per_env_runner=ROLLOUT)
        .fault_tolerance(restart_failed_env_runners=False, env_runner_startup_timeout_s=1.0)
    )
    with pytest.raises(
        WorkerError, match=r"env runner\(s\) \[1\] did not start within env_runner_startup_timeout_s=1$"
    ):
        config.build()


def sigkill_env_runner(algo: Algorithm, index: int) -> None:
    """SIGKILL the process of remote env runner ``index`` (0-based), as a node failure would."""
    pid = ray.get(algo.workers.remote_workers[index].apply.remote(lambda _runner: os.getpid()))
    os.kill(pid, signal.SIGKILL)


@pytest.mark.usefixtures("cluster")
def test_sigkilled_env_runners_are_restarted_and_training_completes(tmp_path):
    config = (
        tuned_config(tmp_path)
        .env_runners(num_env_runners=2)
        .resources(custom_resources_per_env_runner=ROLLOUT)
    )
    config.fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0)
    algo = config.build()
    try:
        algo.train()
        for victim in (0, 1):
            sigkill_env_runner(algo, victim)
            during = algo.train()  # the victim's sample is lost; the other runner's is used
            assert during["num_env_steps_sampled"] > 0
        # Replacements sample once they are up (training went on meanwhile): wait for the second.
        algo.workers.probe_unhealthy_env_runners(timeout_seconds=600)
        after = algo.train()
        assert after["num_env_runner_restarts"] == 2
        assert after["num_healthy_env_runners"] == 2
        assert after["training_iteration"] == 4
        assert algo.workers.foreach_worker(lambda w: w.worker_index, local_worker=False) == [1, 2]
        local = algo.get_policy().get_weights()
        remote = algo.workers.foreach_worker(lambda w: w.get_weights(), local_worker=False)
        for name, array in local.items():  # the replacements got the current weights
            np.testing.assert_array_equal(array, remote[0][name])
            np.testing.assert_array_equal(array, remote[1][name])
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_ignored_env_runner_failure_goes_on_without_it(tmp_path):
    config = (
        tuned_config(tmp_path)
        .env_runners(num_env_runners=2)
        .resources(custom_resources_per_env_runner=ROLLOUT)
    )
    config.fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True)
    algo = config.build()
    try:
        kill_actor(algo.workers.remote_workers[1])
        algo.train()
        result = algo.train()
        assert result["num_healthy_env_runners"] == 1
        assert algo.workers.healthy_env_runner_ids() == [1]
        # The batch keeps its size: the live runner samples the lost one's share too (valid
        # steps only, so a little under train_batch_size where episodes ended mid-batch).
        assert result["num_env_steps_sampled"] >= 0.9 * config.train_batch_size
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_runner_failing_every_time_stops_at_the_tolerance(tmp_path):
    config = (
        tuned_config(tmp_path)
        # an env failing every step: the check at build() would refuse it, and this is about restarts
        .environment("tests.envs:FailingEnv", env_config={"fail_every": 1}, disable_env_checking=True)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
        .resources(custom_resources_per_env_runner=ROLLOUT)
        .fault_tolerance(
            delay_between_env_runner_restarts_s=0, num_consecutive_env_runner_failures_tolerance=2
        )
    )
    algo = config.build()
    try:
        with pytest.raises(WorkerError, match=r"env runner 1 failed 2 times in a row"):
            for _ in range(3):
                algo.train()
    finally:
        algo.stop()


@pytest.mark.usefixtures("cluster")
def test_compressed_observations_train_exactly_as_uncompressed_ones(tmp_path):
    """compress_observations: the remote runner's rollouts travel lz4-packed and the driver
    unpacks them bit for bit: one iteration from the same seed gives the same weights."""
    import numpy as np

    from rltrainer.algorithms.ppo import PPOConfig

    weights = {}
    for compress in (False, True):
        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=1, compress_observations=compress)
            .resources(num_cpus_per_env_runner=0.5)
            .training(train_batch_size=200, minibatch_size=100, num_epochs=2)
            .reporting(storage_path=str(tmp_path))
            .debugging(seed=3)
        )
        algo = config.build()
        try:
            algo.train()
            weights[compress] = algo.get_policy().get_weights()
            (sent,) = algo.workers.foreach_worker(
                lambda runner: type(runner.sample_with_filter_delta()[0].obs).__name__, local_worker=False
            )
            assert sent == ("PackedArray" if compress else "ndarray")
        finally:
            algo.stop()
    assert all(np.array_equal(weights[False][name], weights[True][name]) for name in weights[False])


def test_compression_round_trip_keeps_dtype_and_shape():
    import numpy as np

    from rltrainer.utils.compression import pack, unpack

    frames = np.random.default_rng(0).integers(0, 255, size=(3, 2, 84 * 84 * 4), dtype=np.uint8)
    packed = pack(frames)
    assert np.array_equal(unpack(packed), frames) and unpack(packed).dtype == np.uint8
    zeros = np.zeros((128, 8, 4), np.float32)
    assert pack(zeros).nbytes < zeros.nbytes / 50


@pytest.mark.usefixtures("cluster")
def test_python_environs_reach_the_driver_and_every_remote_runner(tmp_path, monkeypatch):
    import os

    from rltrainer.algorithms.ppo import PPOConfig

    monkeypatch.setenv("RLTRAINER_DRIVER_VAR", "off")  # (undone after the test: no variable left)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .resources(num_cpus_per_env_runner=0.5)
        .evaluation(evaluation_num_env_runners=1, evaluation_interval=1, evaluation_duration=1)
        .python_environment(
            extra_python_environs_for_driver={"RLTRAINER_DRIVER_VAR": "on"},
            extra_python_environs_for_worker={"RLTRAINER_WORKER_VAR": "yes"},
        )
        .reporting(storage_path=str(tmp_path))
    )
    algo = config.build()
    try:
        assert os.environ["RLTRAINER_DRIVER_VAR"] == "on"
        seen = algo.workers.foreach_worker(
            lambda _runner: os.environ.get("RLTRAINER_WORKER_VAR"), local_worker=False
        )
        evaluation = algo.eval_env_runner_group.foreach_worker(
            lambda _runner: os.environ.get("RLTRAINER_WORKER_VAR"), local_worker=False
        )
        assert seen == ["yes"] and evaluation == ["yes"]
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match="extra_python_environs_for_worker"):
        PPOConfig().python_environment(extra_python_environs_for_worker={"N": 1})
