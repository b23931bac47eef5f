"""Devices: learners and env-runner inference on CUDA when the config gives them GPUs.

The first tests run everywhere: the torch path a GPU runner acts with computes what the CPU's
numpy path computes, a runner asked for a GPU that torch cannot see falls back to the CPU with
a warning, and the driver's bundle reserves one GPU share for a learner and a runner that live
in it. The rest need a GPU (``torch.cuda.is_available()``) and skip without one: CI has none;
they ran on a lent H200 (README, "Devices").
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.core.cluster import algorithm_bundles
from rltrainer.env.env_runner import inference_device
from tests.envs import BrightSideEnv, MaskedChoiceEnv

CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

FRAMES = "tests.envs:BrightSideEnv"
SMALL_CONV = {"conv_filters": [[4, [5, 5], 5], [8, [2, 2], 1]]}


def policy_of(config) -> tuple[Algorithm, object]:
    algo = config.debugging(seed=0).build()
    return algo, algo.get_policy()


@pytest.mark.parametrize(
    "config",
    [
        PPOConfig().environment("CartPole-v1"),
        PPOConfig().environment("Pendulum-v1"),  # free log std columns
        PPOConfig().environment(FRAMES).training(model=SMALL_CONV),  # uint8 frames, conv stack
        PPOConfig().environment(MaskedChoiceEnv),  # masked logits
        DQNConfig().environment("CartPole-v1").training(dueling=True),
        SACConfig().environment("Pendulum-v1"),
    ],
    ids=["ppo-discrete", "ppo-box", "ppo-conv", "ppo-masked", "dqn", "sac"],
)
def test_the_torch_path_computes_what_numpy_computes(config):
    """A runner on a GPU acts through ``torch_dist_inputs``; on the CPU through numpy."""
    algo, policy = policy_of(config)
    try:
        space = algo.env_runner_group.local_worker().observation_space
        rows = np.concatenate([policy.preprocessor.transform_one(space.sample()) for _ in range(64)])
        with torch.no_grad():
            from_torch = policy.torch_dist_inputs(torch.from_numpy(rows)).numpy()
        np.testing.assert_allclose(from_torch, policy._numpy_policy(rows), rtol=1e-5, atol=1e-5)
    finally:
        algo.stop()


@pytest.mark.skipif(CUDA, reason="checks the fallback where torch sees no GPU")
def test_a_runner_asked_for_a_gpu_torch_cannot_see_acts_on_the_cpu(caplog):
    config = PPOConfig().environment("CartPole-v1").resources(num_gpus_per_env_runner=0.5)
    with caplog.at_level(logging.WARNING, logger="rltrainer.env.env_runner"):
        assert inference_device(config, worker_index=0) == "cpu"
    assert "num_gpus_per_env_runner=0.5 but torch sees no GPU" in caplog.text


def test_which_runners_act_on_a_gpu():
    with_gpus = PPOConfig().resources(num_gpus_per_env_runner=1)
    assert inference_device(PPOConfig(), worker_index=1) == "cpu"
    # The local runner samples only when there are no remote ones.
    assert inference_device(with_gpus.env_runners(num_env_runners=2), worker_index=0) == "cpu"


def test_the_driver_reserves_one_gpu_share_for_its_learner_and_runner():
    config = PPOConfig().resources(num_gpus=1, num_gpus_per_env_runner=0.5)
    assert algorithm_bundles(config)[0]["GPU"] == 1.0  # one process, one device
    config = PPOConfig().resources(num_gpus_per_env_runner=0.25)
    assert algorithm_bundles(config)[0]["GPU"] == 0.25
    remote = PPOConfig().env_runners(num_env_runners=2).resources(num_gpus_per_env_runner=0.25)
    driver, *runners = algorithm_bundles(remote)
    assert "GPU" not in driver and [bundle["GPU"] for bundle in runners] == [0.25, 0.25]


# --- on a GPU --------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize(
    ("env", "model"),
    [
        ("CartPole-v1", {}),
        (FRAMES, SMALL_CONV),
        ("CartPole-v1", {"use_lstm": True, "lstm_cell_size": 32}),
        ("tests.envs:CameraAndSwitchEnv", {**SMALL_CONV, "post_fcnet_hiddens": [16]}),  # image + vector
        ("tests.envs:ControlPanelEnv", {}),  # Dict actions
    ],
    ids=["mlp", "conv", "lstm", "mixed-obs", "dict-actions"],
)
def test_ppo_trains_with_a_gpu_learner_and_gpu_inference(tmp_path, env, model):
    config = (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2, model=model)
        .resources(num_gpus=1, num_gpus_per_env_runner=1)
        .reporting(storage_path=str(tmp_path))
    )
    algo = config.debugging(seed=0).build()
    try:
        policy = algo.get_policy()
        assert policy.device.type == "cuda"
        assert next(policy.model.parameters()).is_cuda
        assert algo.learner_group.local_learner.device.type == "cuda"
        results = [algo.train() for _ in range(3)]
        assert all(
            np.isfinite(r["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"])
            for r in results
        )
        # The learner's weights reached the runner on the GPU.
        learner = algo.learner_group.local_learner.module.state_dict()
        for name, value in policy.model.state_dict().items():
            torch.testing.assert_close(value, learner[name])
        checkpoint = algo.save()
    finally:
        algo.stop()
    # A checkpoint from a GPU run restores on the CPU (weights are saved as CPU tensors).
    restored = Algorithm.from_checkpoint(
        checkpoint, config_overrides={"num_gpus": 0, "num_gpus_per_env_runner": 0}
    )
    try:
        assert restored.get_policy().device.type == "cpu"
        assert not next(restored.get_policy().model.parameters()).is_cuda
        restored.train()
    finally:
        restored.stop()


@needs_gpu
def test_gpu_inference_matches_the_cpu():
    """The same weights give the same greedy actions and values on the GPU and the CPU."""
    config = PPOConfig().environment(FRAMES).training(model=SMALL_CONV).debugging(seed=0)
    algo = config.build()
    try:
        policy = algo.get_policy()
        rows = np.concatenate(
            [
                policy.preprocessor.transform_one(BrightSideEnv().observation_space.sample())
                for _ in range(256)
            ]
        )
        cpu = policy.compute(rows, explore=False)
        cpu_values = policy.compute_values(rows)
        policy.set_device("cuda")
        gpu = policy.compute(rows, explore=False)
        np.testing.assert_allclose(gpu["action_dist_inputs"], cpu["action_dist_inputs"], rtol=1e-3, atol=1e-4)
        np.testing.assert_array_equal(gpu["actions"], cpu["actions"])
        np.testing.assert_allclose(policy.compute_values(rows), cpu_values, rtol=1e-3, atol=1e-4)
    finally:
        algo.stop()


@needs_gpu
@pytest.mark.parametrize(
    "config",
    [
        DQNConfig().environment("CartPole-v1").training(num_steps_sampled_before_learning_starts=64),
        SACConfig().environment("Pendulum-v1").training(num_steps_sampled_before_learning_starts=64),
        SACConfig()  # conv encoders in the actor and critics, uint8 frames from the buffer
        .environment(FRAMES)
        .training(model=SMALL_CONV, num_steps_sampled_before_learning_starts=64),
    ],
    ids=["dqn", "sac", "sac-conv"],
)
def test_off_policy_algorithms_train_on_a_gpu(config):
    algo = config.resources(num_gpus=1, num_gpus_per_env_runner=1).debugging(seed=0).build()
    try:
        assert algo.get_policy().device.type == "cuda"
        for _ in range(3):
            result = algo.train()
        assert result["num_env_steps_sampled"] > 64
        obs = algo.env_runner_group.local_worker().observation_space.sample()
        assert np.isfinite(algo.compute_single_action(obs)).all()
    finally:
        algo.stop()


@needs_gpu
@pytest.mark.usefixtures("local_ray")
def test_remote_learner_and_runners_on_gpu_shares():
    """A learner actor with a GPU trains on CUDA; two runners share the GPU for inference."""
    config = (
        PPOConfig()
        .environment(FRAMES)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=32)
        .resources(num_learners=1, num_gpus_per_learner=0.5, num_gpus_per_env_runner=0.25)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2, model=SMALL_CONV)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        devices = algo.workers.foreach_worker(lambda runner: runner.policy.device.type)
        assert devices == ["cpu", "cuda", "cuda"]  # the local runner does not sample here
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"])
    finally:
        algo.stop()


@needs_gpu
@pytest.mark.parametrize("algo", ["IMPALA", "APPO"])
def test_impala_and_appo_train_on_a_gpu_learner(algo):
    """V-trace and the target network on CUDA, conv encoder, uint8 frames from the runner."""
    from rltrainer.algorithms.registry import get_config_class

    config = (
        get_config_class(algo)()
        .environment(FRAMES)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=32)
        .training(train_batch_size=128, model=SMALL_CONV)
        .resources(num_gpus=1)
        .reporting(min_time_s_per_iteration=0)
        .debugging(seed=0)
    )
    algo_ = config.build()
    try:
        learner = algo_.learner_group.local_learner
        assert learner.device.type == "cuda"
        for _ in range(3):
            result = algo_.train()
        for key in ("policy_loss", "vf_loss", "entropy", "mean_rho"):
            assert np.isfinite(result[key]), key
        if algo == "APPO":
            assert next(learner.target.parameters()).device.type == "cuda"
    finally:
        algo_.stop()


@needs_gpu
@pytest.mark.usefixtures("local_ray")
def test_appo_with_async_runners_and_a_learner_actor_on_gpu_shares():
    from rltrainer.algorithms.appo import APPOConfig

    config = (
        APPOConfig()
        .environment(FRAMES)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=32)
        .resources(num_learners=1, num_gpus_per_learner=0.5, num_gpus_per_env_runner=0.25)
        .training(train_batch_size=128, model=SMALL_CONV)
        .reporting(min_time_s_per_iteration=1)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        assert algo.learner_group.foreach_learner(lambda learner: learner.device.type) == ["cuda"]
        for _ in range(2):
            result = algo.train()
        assert result["num_learner_updates"] >= 2
        assert np.isfinite(result["total_loss"])
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_fake_gpus_lay_out_a_gpu_config_on_the_cpu(tmp_path):
    """RLlib's ``_fake_gpus``: no GPU asked of Ray, learners on the CPU, and runners given GPUs
    act through the GPU's code path (one torch call per batch), all on a machine without GPUs."""
    from rltrainer.core.models import NumpyMLP

    config = PPOConfig.from_dict(
        {
            "env": "CartPole-v1",
            "_fake_gpus": True,
            "num_gpus": 1,
            "num_env_runners": 1,
            "num_gpus_per_env_runner": 0.5,
            "num_cpus_per_env_runner": 0.5,
            "train_batch_size": 200,
            "minibatch_size": 100,
            "storage_path": str(tmp_path),
        }
    )
    assert config.fake_gpus and all("GPU" not in bundle for bundle in algorithm_bundles(config))
    algo = config.build()
    try:
        assert algo.learner_group.local_learner.device.type == "cpu"
        (remote,) = algo.workers.foreach_worker(
            lambda runner: (str(runner.policy.device), isinstance(runner.policy._numpy_policy, NumpyMLP)),
            local_worker=False,
        )
        assert remote == ("cpu", False)  # the torch call, not numpy
        assert isinstance(algo.get_policy()._numpy_policy, NumpyMLP)  # the driver's runner has no GPU
        assert algo.train()["num_env_steps_sampled"] >= 200
    finally:
        algo.stop()
