"""SAC beyond flat observations: image observations (a conv stack per network, uint8 frames in
the replay buffer), Dict observations holding images, and custom models as encoders."""

from __future__ import annotations

import numpy as np
import pytest

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.sac import SACConfig
from rltrainer.core.encoders import ComplexEncoder, ConvEncoder
from rltrainer.models import ModelCatalog
from rltrainer.models.torch.adapter import CustomEncoder
from tests.envs import BrightSideBoxEnv, BrightSideEnv, CameraAndSwitchEnv
from tests.test_models import TinyModel

SMALL_CONV = [[8, [5, 5], 5], [16, [2, 2], 1]]


def image_sac(env, **training) -> SACConfig:
    return (
        SACConfig()
        .environment(env)
        .training(
            model={"conv_filters": SMALL_CONV},
            q_model_config={"fcnet_hiddens": [32]},
            policy_model_config={"fcnet_hiddens": [32]},
            train_batch_size=64,
            num_steps_sampled_before_learning_starts=200,
            optimization_config={
                "actor_learning_rate": 1e-3,
                "critic_learning_rate": 1e-3,
                "entropy_learning_rate": 1e-3,
            },
            **training,
        )
        .reporting(min_sample_timesteps_per_iteration=200, metrics_num_episodes_for_smoothing=10)
        .debugging(seed=0)
    )


@pytest.mark.parametrize(
    ("env", "training"),
    [
        # With 2 actions the automatic target (0.98 log 2) holds the policy near uniform.
        (BrightSideEnv, {"target_entropy": 0.2}),
        (BrightSideBoxEnv, {}),
    ],
    ids=["discrete", "box"],
)
def test_sac_learns_from_uint8_frames(env, training, tmp_path):
    algo = image_sac(env, **training).reporting(storage_path=str(tmp_path)).build()
    try:
        module = algo.learner_group.local_learner.module
        encoders = [m.encoder if hasattr(m, "encoder") else m.trunk for m in (module.pi, *module.critics())]
        assert all(isinstance(e, ConvEncoder) for e in encoders) and len({id(e) for e in encoders}) == 3
        assert algo.replay_buffer.get_state()["obs"].dtype == np.uint8
        returns = []
        while len(returns) < 12 and max(returns, default=0.0) < 8.0:
            returns.append(algo.train()["episode_return_mean"])
        assert max(returns) >= 8.0, returns  # a blind policy scores about 5
        checkpoint = algo.save()
        frame = env().observation_space.sample()
        action = algo.compute_single_action(frame, explore=False)
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(checkpoint)
    try:
        np.testing.assert_allclose(restored.compute_single_action(frame, explore=False), action, rtol=1e-5)
    finally:
        restored.stop()


def test_sac_reads_dict_observations_with_images():
    config = image_sac(CameraAndSwitchEnv).training(
        model={"conv_filters": SMALL_CONV, "post_fcnet_hiddens": [16]}
    )
    algo = config.build()
    try:
        assert isinstance(algo.learner_group.local_learner.module.pi.encoder, ComplexEncoder)
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["info"]["learner"]["default_policy"]["learner_stats"]["critic_loss"])
    finally:
        algo.stop()


@pytest.fixture
def tiny_model():
    saved = ModelCatalog.registered()
    ModelCatalog.register_custom_model("tiny", TinyModel)
    yield
    ModelCatalog._custom_models.clear()
    ModelCatalog._custom_models.update(saved)


@pytest.mark.usefixtures("tiny_model")
def test_sac_with_a_custom_model_as_its_encoders():
    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .training(
            model={"custom_model": "tiny", "fcnet_hiddens": [16]},
            num_steps_sampled_before_learning_starts=100,
        )
        .reporting(min_sample_timesteps_per_iteration=200)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        module = algo.learner_group.local_learner.module
        assert isinstance(module.pi.encoder, CustomEncoder) and isinstance(module.q1.encoder, CustomEncoder)
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["info"]["learner"]["default_policy"]["learner_stats"]["actor_loss"])
    finally:
        algo.stop()
