"""Dict and Tuple observations that mix images with other parts (#16 item 6): one conv stack per
image, the rest through ``fcnet_hiddens``, then ``post_fcnet_hiddens`` (``ComplexEncoder``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.core.encoders import ComplexEncoder, ConvEncoder
from rltrainer.env.preprocessors import Preprocessor, leaf_columns
from rltrainer.errors import ConfigError
from tests.envs import CameraAndSwitchEnv

SMALL_CONV = [[8, [5, 5], 5], [16, [2, 2], 1]]


def mixed_ppo(**model) -> PPOConfig:
    return (
        PPOConfig()
        .environment(CameraAndSwitchEnv)
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(
            train_batch_size=256,
            minibatch_size=64,
            num_epochs=4,
            lr=1e-3,
            model={"conv_filters": SMALL_CONV, "fcnet_hiddens": [32], **model},
        )
        .debugging(seed=0)
    )


def test_leaf_columns_follow_the_rows_order():
    space = spaces.Dict(
        {
            "a": spaces.Box(0, 255, (4, 4, 1), np.uint8),
            "b": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,)))),
        }
    )
    leaves = [(path, start, stop) for path, _, start, stop in leaf_columns(space)]
    assert leaves == [("a", 0, 16), ("b/0", 16, 19), ("b/1", 19, 21)]
    row = Preprocessor(space).transform_one(space.sample())
    assert row.shape == (1, 21) and row.dtype == np.float32


def test_ppo_reads_an_image_and_a_switch_together():
    # The answer is the side XOR the switch: the parts meet in post_fcnet_hiddens.
    algo = mixed_ppo(post_fcnet_hiddens=[32]).build()
    try:
        model = algo.get_policy().model
        encoder = model.trunk
        assert isinstance(encoder, ComplexEncoder) and isinstance(encoder.images[0], ConvEncoder)
        assert encoder.image_columns == [(0, 200)] and encoder.vector_columns == [(200, 205)]
        returns = [algo.train()["episode_return_mean"] for _ in range(25)]
        assert max(returns) >= 8.5, returns  # either part alone scores 5
    finally:
        algo.stop()


def test_encoder_features_and_post_layers():
    model = mixed_ppo(post_fcnet_hiddens=[24], vf_share_layers=True).build()
    try:
        encoder = model.get_policy().model.trunk
        assert encoder.out_size == 24 and model.get_policy().model.vf_encoder is None
        rows = torch.zeros(5, 205)
        assert encoder(rows).shape == (5, 24)
        action = model.compute_single_action(CameraAndSwitchEnv().observation_space.sample(), explore=False)
        assert action in (0, 1)
    finally:
        model.stop()


@pytest.mark.parametrize(
    "config",
    [
        mixed_ppo(use_lstm=True, lstm_cell_size=16),
        DQNConfig()
        .environment(CameraAndSwitchEnv)
        .training(model={"conv_filters": SMALL_CONV}, num_steps_sampled_before_learning_starts=32),
    ],
    ids=["ppo-lstm", "dqn"],
)
def test_mixed_observations_with_an_lstm_and_dqn(config):
    algo = config.build()
    try:
        assert any(isinstance(m, ComplexEncoder) for m in algo.get_policy().model.modules())
        for _ in range(2):
            result = algo.train()
        assert result["num_env_steps_sampled"] > 0
    finally:
        algo.stop()


def test_filters_that_do_not_fit_an_image_part_name_it():
    with pytest.raises(ConfigError, match=r"observation part 'camera'.*conv_filters"):
        mixed_ppo(conv_filters=[[8, [5, 5], 5], [16, [5, 5], 5], [16, [5, 5], 5]]).build()
    # Image sizes without default filters are named too.
    with pytest.raises(ConfigError, match=r"observation part 'camera'"):
        mixed_ppo(conv_filters=None).environment(CameraAndSwitchEnv, env_config={"size": 12}).build()


def test_a_mixed_observation_policy_exports_to_onnx(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    algo = mixed_ppo(post_fcnet_hiddens=[16]).build()
    try:
        path = algo.export_policy_model(str(tmp_path), onnx=18)
        policy, space = algo.get_policy(), CameraAndSwitchEnv().observation_space
        observations = [space.sample() for _ in range(100)]
        rows = np.concatenate([policy.preprocessor.transform_one(obs) for obs in observations])
        actions = onnxruntime.InferenceSession(path).run(["actions"], {"obs": rows})[0]
        np.testing.assert_array_equal(actions, algo.compute_actions(observations, explore=False))
    finally:
        algo.stop()
