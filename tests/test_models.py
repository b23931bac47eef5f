"""Models beyond MLPs: conv stacks over ``uint8`` frames (kept ``uint8`` from the env to the
learner), RLlib's model settings, and custom models (``ModelCatalog``, ``TorchModelV2``) for PPO
and DQN, in the driver and in remote actors, through checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.cli import main
from rltrainer.core.encoders import ConvEncoder, EncoderActorCritic
from rltrainer.errors import ConfigError
from rltrainer.models import ModelCatalog, TorchModelV2
from rltrainer.models.conv_filters import DEFAULT_CONV_FILTERS
from rltrainer.models.preprocessors import get_preprocessor
from rltrainer.models.torch.fcnet import FullyConnectedNetwork as TorchFC
from rltrainer.models.torch.torch_modelv2 import TorchModelV2 as RLlibTorchModelV2
from rltrainer.utils.annotations import override
from rltrainer.utils.framework import try_import_tf, try_import_torch

FRAMES = "tests.envs:BrightSideEnv"


class TinyModel(TorchModelV2):
    """A custom model: a policy MLP on ``obs_flat`` and a separate value MLP."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, hidden: int = 32):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        size = int(np.prod(obs_space.shape))
        self.policy_net = nn.Sequential(nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, num_outputs))
        self.value_net = nn.Sequential(nn.Linear(size, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self._values = None

    def forward(self, input_dict, state, seq_lens):  # noqa: ARG002
        self._values = self.value_net(input_dict["obs_flat"]).squeeze(-1)
        return self.policy_net(input_dict["obs_flat"]), state

    def value_function(self):
        return self._values


# RLlib's custom-model example (a model wrapping RLlib's fully connected network), with only its
# imports changed from ray.rllib to rltrainer.
rllib_torch, rllib_nn = try_import_torch()


class RLlibsCustomTorchModel(RLlibTorchModelV2, rllib_nn.Module):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        RLlibTorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        rllib_nn.Module.__init__(self)
        self.torch_sub_model = TorchFC(obs_space, action_space, num_outputs, model_config, name)

    @override(RLlibTorchModelV2)
    def forward(self, input_dict, state, seq_lens):
        input_dict["obs"] = input_dict["obs"].float()
        fc_out, _ = self.torch_sub_model(input_dict, state, seq_lens)
        return fc_out, []

    @override(RLlibTorchModelV2)
    def value_function(self):
        return rllib_torch.reshape(self.torch_sub_model.value_function(), [-1])


class WrongWidth(TinyModel):
    def forward(self, input_dict, state, seq_lens):
        outputs, state = super().forward(input_dict, state, seq_lens)
        return outputs[:, :1], state


class NotAModel(nn.Module):
    pass


class BrokenForward(TinyModel):
    def forward(self, input_dict, state, seq_lens):  # noqa: ARG002
        return self.policy_net(input_dict["obs_flat"][:, :2]), state  # 2 columns for a 4-wide layer


@pytest.fixture(autouse=True)
def _registrations():
    saved = ModelCatalog.registered()
    ModelCatalog.register_custom_model("tiny", TinyModel)
    yield
    ModelCatalog._custom_models.clear()
    ModelCatalog._custom_models.update(saved)


def frames_ppo(**model) -> PPOConfig:
    return (
        PPOConfig()
        .environment(FRAMES)
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=4, lr=1e-3, model=model)
        .debugging(seed=0)
    )


# --- frames ------------------------------------------------------------------------------------


def test_ppo_learns_from_uint8_frames_with_the_default_conv_stack(tmp_path):
    algo = frames_ppo().reporting(storage_path=str(tmp_path)).build()
    try:
        model = algo.get_policy().model
        assert isinstance(model, EncoderActorCritic) and model.vf_encoder is not None  # vf_share_layers=False
        rollout = algo.env_runner_group.local_worker()._rollout(4, explore=True)
        assert rollout.obs.dtype == np.uint8 and rollout.obs.shape == (4, 8, 10 * 10 * 2)
        returns = [algo.train()["episode_return_mean"] for _ in range(25)]
        assert max(returns) >= 8.5, returns  # a blind policy scores 5
        checkpoint = algo.save()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(checkpoint)
    try:
        frame = restored.env_runner_group.local_worker().env.envs[0].unwrapped._frame()
        as_float = frame.astype(np.float32)  # the space, not the array, decides the scaling
        assert restored.compute_single_action(frame, explore=False) == restored.compute_single_action(
            as_float, explore=False
        )
    finally:
        restored.stop()


@pytest.mark.parametrize("size", sorted(DEFAULT_CONV_FILTERS))
def test_default_conv_filters_fit_their_frame_sizes(size):
    space = spaces.Box(0, 255, (*size, 3), np.uint8)
    encoder = ConvEncoder(space, None, "relu", [], "relu")
    features = encoder(torch.zeros(2, int(np.prod(space.shape)), dtype=torch.uint8))
    assert features.shape == (2, encoder.out_size)
    if size in ((84, 84), (42, 42)):
        assert encoder.out_size == 256  # RLlib's: the last layer leaves a 1x1x256 map


@pytest.mark.parametrize(
    ("shape", "filters"),
    [((84, 84, 4), None), ((10, 10, 3), None), ((7, 7, 2), [[4, [2, 2], 1], [6, 7, 1]])],
    ids=["rllib-84x84", "rllib-10x10", "after-a-pad-layer"],
)
def test_a_last_layer_over_the_whole_frame_is_a_matmul_with_the_convolutions_results(shape, filters):
    # WholeFrameConv2d: the same parameters, outputs and gradients as nn.Conv2d's own forward.
    from rltrainer.core.encoders import WholeFrameConv2d

    torch.manual_seed(0)
    encoder = ConvEncoder(spaces.Box(0, 255, shape, np.uint8), filters, "relu", [], "relu")
    assert isinstance(encoder.convs[-2], WholeFrameConv2d)
    rows = torch.randint(0, 256, (5, int(np.prod(shape))), dtype=torch.uint8)
    features = encoder(rows)
    features.square().sum().backward()
    grads = [p.grad.clone() for p in encoder.parameters()]
    encoder.zero_grad()
    x = rows.reshape(-1, *shape).permute(0, 3, 1, 2).float() / 255
    for layer in encoder.convs:
        x = nn.Conv2d.forward(layer, x) if isinstance(layer, nn.Conv2d) else layer(x)
    x.flatten(1).square().sum().backward()
    torch.testing.assert_close(features, x.flatten(1), rtol=1e-5, atol=1e-5)
    for grad, param in zip(grads, encoder.parameters(), strict=True):
        torch.testing.assert_close(grad, param.grad, rtol=1e-4, atol=1e-5)


def test_float_rows_of_a_uint8_space_are_not_scaled_in_place():
    encoder = ConvEncoder(spaces.Box(0, 255, (10, 10, 3), np.uint8), None, "relu", [], "relu")
    rows = torch.full((2, 300), 255.0)
    with torch.no_grad():
        assert torch.equal(encoder(rows), encoder(rows.to(torch.uint8)))
    assert (rows == 255.0).all()


def test_post_fcnet_hiddens_and_shared_layers():
    algo = frames_ppo(
        vf_share_layers=True, post_fcnet_hiddens=[64], conv_filters=[[8, 3, 2], [16, 3, 2]]
    ).build()
    try:
        model = algo.get_policy().model
        assert model.vf_encoder is None and model.trunk.out_size == 64
        names = set(algo.get_policy().get_weights())
        assert {"trunk.convs.0.weight", "trunk.post.0.weight", "pi.0.weight", "vf.0.weight"} <= names
        algo.train()
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_frames_stay_uint8_in_remote_runners_and_the_replay_buffer():
    config = (
        DQNConfig()
        .environment(FRAMES)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4, rollout_fragment_length=8)
        .training(
            train_batch_size=32,
            replay_buffer_config={"capacity": 1000},
            num_steps_sampled_before_learning_starts=64,
        )
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        dtypes = algo.workers.foreach_worker(
            lambda w: w._rollout(2, explore=True).obs.dtype.str, local_worker=False
        )
        assert dtypes == [np.dtype(np.uint8).str]
        for _ in range(3):
            algo.train()
        assert algo.replay_buffer._storage.obs.dtype == np.uint8
        q_values = algo.get_policy().compute_actions(np.zeros((3, 200), np.uint8))[2]["q_values"]
        assert q_values.shape == (3, 2)
    finally:
        algo.stop()


# --- custom models -----------------------------------------------------------------------------


def test_a_registered_custom_model_trains_saves_and_restores(tmp_path):
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(
            train_batch_size=256,
            minibatch_size=128,
            num_epochs=2,
            model={"custom_model": "tiny", "custom_model_config": {"hidden": 16}},
        )
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        policy = algo.get_policy()
        assert (
            isinstance(policy.model.model, TinyModel) and policy.model.model.policy_net[0].out_features == 16
        )
        algo.train()
        checkpoint = Path(algo.save())
    finally:
        algo.stop()
    saved = json.loads((checkpoint / "rltrainer_checkpoint.json").read_text())
    assert saved["config"]["model"]["custom_model"] == "tiny"
    assert not [p for p in checkpoint.iterdir() if p.suffix in (".pkl", ".pickle")]
    restored = Algorithm.from_checkpoint(str(checkpoint))
    try:
        obs = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
        before = {k: v for k, v in restored.get_policy().get_weights().items()}
        assert "model.policy_net.0.weight" in before
        restored.compute_single_action(obs, explore=False)
    finally:
        restored.stop()


def test_rllibs_custom_model_example_learns_with_its_imports_changed(tmp_path):
    """RLlib's example model around its ``FullyConnectedNetwork`` (``fcnet_hiddens`` and
    ``fcnet_activation`` from the model config, a separate value stack) learns CartPole as the
    built-in MLP does (the tuned example's settings)."""
    ModelCatalog.register_custom_model("rllib_example", RLlibsCustomTorchModel)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(
            train_batch_size=256,
            minibatch_size=256,
            num_epochs=20,
            gamma=0.98,
            lambda_=0.8,
            lr=3e-3,
            kl_coeff=0.0,
            vf_clip_param=None,
            model={"custom_model": "rllib_example", "fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
        )
        .reporting(storage_path=str(tmp_path), metrics_num_episodes_for_smoothing=20)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        sub = algo.get_policy().model.model.torch_sub_model
        assert [m.out_features for m in sub._hidden_layers if isinstance(m, nn.Linear)] == [64, 64]
        assert isinstance(sub._hidden_layers[1], nn.ReLU) and sub._value_branch_separate is not None
        best = 0.0
        for _ in range(60):
            best = max(best, algo.train()["episode_return_mean"])
            if best >= 200:
                break
        assert best >= 200, best
    finally:
        algo.stop()


def test_rllibs_model_helpers():
    """``override`` refuses a method its parent lacks; ``try_import_tf`` answers as RLlib does
    without TensorFlow; the network without ``num_outputs`` gives its features."""
    with pytest.raises(NameError, match="forwrd does not override any method of TorchModelV2"):

        class Typo(RLlibTorchModelV2):
            @override(RLlibTorchModelV2)
            def forwrd(self, input_dict, state, seq_lens): ...

    assert try_import_tf() == (None, None, None)
    with pytest.raises(ImportError, match="torch only"):
        try_import_tf(error=True)
    space = spaces.Box(-1, 1, (3,))
    features = TorchFC(space, spaces.Discrete(2), None, {"fcnet_hiddens": [16], "vf_share_layers": True}, "f")
    out, state = features({"obs_flat": torch.zeros(5, 3)}, [], None)
    assert features.num_outputs == 16 and out.shape == (5, 16) and state == []
    assert features.value_function().shape == (5,) and features._value_branch_separate is None
    with pytest.raises(RuntimeError, match="call forward"):
        TorchFC(space, spaces.Discrete(2), 2, {}, "f").value_function()
    with pytest.raises(ConfigError, match="unknown fcnet_activation 'gelu'"):
        TorchFC(space, spaces.Discrete(2), 2, {"fcnet_activation": "gelu"}, "f")


def test_a_custom_model_by_class_path_gives_dqn_features_for_its_q_head():
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .training(
            model={"custom_model": "tests.test_models:TinyModel", "fcnet_hiddens": [24]},
            train_batch_size=32,
            num_steps_sampled_before_learning_starts=32,
        )
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        q = algo.get_policy().model.q
        assert isinstance(q.trunk.model, TinyModel) and q.trunk.out_size == 24  # the last of fcnet_hiddens
        algo.train()
        algo.train()
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_registrations_reach_remote_env_runners_and_learners():
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .resources(num_learners=1)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1, model={"custom_model": "tiny"})
    )
    algo = config.build()
    try:
        algo.train()
        kinds = algo.workers.foreach_worker(lambda w: type(w.policy.model.model).__name__, local_worker=False)
        assert kinds == ["TinyModel"]
        assert algo.learner_group.foreach_learner(lambda learner: type(learner.module.model).__name__) == [
            "TinyModel"
        ]
    finally:
        algo.stop()


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            PPOConfig().environment("CartPole-v1").training(model={"custom_model": "nope"}),
            r"'nope' is not registered \(registered: tiny\)",
        ),
        (
            PPOConfig().environment("CartPole-v1").training(model={"custom_model": "no_such_pkg:M"}),
            r"'no_such_pkg:M' cannot be imported",
        ),
        (
            PPOConfig()
            .environment("CartPole-v1")
            .training(model={"custom_model": "tests.test_models:NotAModel"}),
            r"not a TorchModelV2 subclass",
        ),
        (
            PPOConfig()
            .environment("CartPole-v1")
            .training(model={"custom_model": "tests.test_models:WrongWidth"}),
            r"outputs of shape \(2, 1\) for a batch of 2; expected \(2, 2\)",
        ),
        (
            PPOConfig()
            .environment("CartPole-v1")
            .training(model={"custom_model": "tests.test_models:BrokenForward"}),
            r"BrokenForward: forward\(\) on a batch of 2 observations of Box.* raised RuntimeError: mat1",
        ),
        (
            PPOConfig()
            .environment("CartPole-v1")
            .training(model={"custom_model": "tiny", "custom_model_config": {"width": 3}}),
            r"TinyModel: constructing it failed .*unexpected keyword argument 'width'",
        ),
        (
            frames_ppo().environment(env_config={"size": 20}),
            r"no default conv_filters for 20x20 frames \(defaults exist for 96x96, 84x84",
        ),
        (
            frames_ppo(conv_filters=[[16, 4, 2], [32, 11, 1]]),
            r"layer 1 \[32, 11, 1\] shrinks the 10x10 frame below 1x1 \(-5x-5\)",
        ),
    ],
)
def test_models_that_do_not_fit_fail_at_build(config, message):
    with pytest.raises(ConfigError, match=message):
        config.build()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"conv_filters": [[16, [8, 8]]]},
            r"'conv_filters': layer 0 is \[16, \[8, 8\]\]; each layer is \[out_channels, kernel, stride\]",
        ),
        ({"custom_model": 3}, r"custom_model must be a registered name"),
        ({"fcnet_hidens": [8]}, r"unknown model setting 'fcnet_hidens' \(did you mean 'fcnet_hiddens'\?\)"),
    ],
)
def test_bad_model_settings_are_config_errors(model, message):
    with pytest.raises(ConfigError, match=message):
        PPOConfig().training(model=model)


def test_cli_unregistered_custom_model_is_one_line(tmp_path, capsys):
    code = main([
        "train", "--algo", "PPO", "--env", "CartPole-v1", "--storage-path", str(tmp_path),
        "--config", json.dumps({"model": {"custom_model": "missing"}}),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "model.custom_model 'missing' is not registered" in err


# --- the documents' model API ------------------------------------------------------------------


def test_the_documents_model_calls_on_ppo():
    algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=128, minibatch_size=64).build()
    try:
        policy = algo.get_policy()
        prep = get_preprocessor(policy.observation_space)(policy.observation_space)
        obs = np.array([[0.1, 0.2, 0.3, 0.4], [0.0, -0.1, 0.02, 0.3]], np.float32)
        rows = np.stack([prep.transform(o) for o in obs])
        logits, state = policy.model({"obs": torch.from_numpy(rows)})
        assert logits.shape == (2, 2) and state == []
        values = policy.model.value_function()
        np.testing.assert_allclose(values.detach().numpy(), policy.compute_values(rows), rtol=1e-5)
        dist = policy.dist_class(logits, policy.model)
        actions = dist.sample()
        assert dist.logp(actions).shape == (2,) and dist.entropy().shape == (2,)
        assert torch.allclose(dist.kl(dist), torch.zeros(2), atol=1e-6)
        greedy = dist.deterministic_sample().numpy()
        assert list(greedy) == [algo.compute_single_action(o, explore=False) for o in obs]
        logits_np, _ = policy.model({"obs": rows})  # numpy batches are fine too
        assert torch.equal(logits_np, logits)
    finally:
        algo.stop()


@pytest.mark.parametrize("dueling", [True, False])
def test_the_documents_dqn_q_values_and_state_value(dueling):
    algo = DQNConfig().environment("CartPole-v1").training(dueling=dueling).build()
    try:
        model = algo.get_policy().model
        obs = np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)
        model_out, _ = model({"obs": obs})
        q_values = model.get_q_value_distributions(model_out)[0]
        expected = algo.get_policy().compute_actions(obs)[2]["q_values"]
        np.testing.assert_allclose(q_values.detach().numpy(), expected, rtol=1e-5)
        value = model.get_state_value(model_out)
        assert value.shape == (1, 1)
        if not dueling:
            assert value.item() == pytest.approx(q_values.max().item())
    finally:
        algo.stop()


def test_a_custom_models_own_outputs_through_the_documents_call():
    algo = PPOConfig().environment("CartPole-v1").training(model={"custom_model": "tiny"}).build()
    try:
        policy = algo.get_policy()
        outputs, state = policy.model({"obs": np.zeros((3, 4), np.float32)})
        assert outputs.shape == (3, 2) and state == [] and policy.model.value_function().shape == (3,)
    finally:
        algo.stop()


def test_get_preprocessor_gives_the_row_the_model_reads():
    space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "item": spaces.Discrete(3)})
    prep = get_preprocessor(space)(space)
    row = prep.transform({"item": 2, "pos": np.array([0.5, -0.5], np.float32)})
    assert prep.shape == (5,) and list(row) == [0.0, 0.0, 1.0, 0.5, -0.5]  # Dict keys in sorted order
    frames = spaces.Box(0, 255, (4, 4, 1), np.uint8)
    assert (
        ModelCatalog.get_preprocessor_for_space(frames).transform(np.ones((4, 4, 1), np.uint8)).dtype
        == np.uint8
    )


# --- action masks ------------------------------------------------------------------------------

MASKED_ENV = "tests.envs:MaskedChoiceEnv"  # a masked action raises in the env


def test_ppo_never_takes_a_masked_action_and_learns_the_best_allowed_one():
    config = (
        PPOConfig()
        .environment(MASKED_ENV)
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(
            train_batch_size=256, minibatch_size=64, num_epochs=4, lr=1e-3, model={"fcnet_hiddens": [64, 64]}
        )
        .exploration(exploration_config={"type": "StochasticSampling", "random_timesteps": 256})
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        assert type(algo.get_policy().model).__name__ == "MaskedActorCritic"
        returns = [algo.train()["episode_return_mean"] for _ in range(20)]
        assert max(returns) >= 8.5, returns  # random allowed actions score about 5
        env = algo.env_runner_group.local_worker().env.envs[0].unwrapped
        for _ in range(50):
            obs = env._obs()
            for explore in (True, False):
                assert obs["action_mask"][algo.compute_single_action(obs, explore=explore)] == 1.0
    finally:
        algo.stop()


@pytest.mark.parametrize("exploration", ["EpsilonGreedy", "SoftQ", "Random"])
def test_dqn_explores_and_acts_among_allowed_actions_only(exploration):
    config = (
        DQNConfig()
        .environment(MASKED_ENV)
        .env_runners(num_envs_per_env_runner=4)
        .training(train_batch_size=32, num_steps_sampled_before_learning_starts=64)
        .exploration(exploration_config={"type": exploration})
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        for _ in range(4):
            result = algo.train()  # a masked action would raise in the env
        assert result["timesteps_total"] > 64
        q = algo.get_policy().compute_actions(np.array([[0, 1, 0, 0, 0.5, 0.5, 0.5]], np.float32))[2][
            "q_values"
        ]
        assert q.argmax() == 1 and q[0, 0] < -1e8  # masked Q-values: far below the rest
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            PPOConfig().environment(MASKED_ENV, env_config={"mask_size": 3}),
            r"'action_mask' must be a Box or MultiBinary of shape \(4,\), one entry per action",
        ),
        (
            SACConfig().environment(MASKED_ENV),
            r"SAC has no action masks yet",
        ),
    ],
)
def test_masks_that_do_not_fit_fail_at_build(config, message):
    with pytest.raises(ConfigError, match=message):
        config.build()


def test_action_mask_key_none_turns_masking_off():
    algo = PPOConfig().environment(MASKED_ENV).training(model={"action_mask_key": None}).build()
    try:
        assert type(algo.get_policy().model).__name__ == "ActorCritic"
    finally:
        algo.stop()


# --- MultiDiscrete and MultiBinary actions -----------------------------------------------------


@pytest.mark.parametrize("kind", ["multi_discrete", "multi_binary"])
def test_ppo_learns_multi_discrete_and_multi_binary_actions(kind):
    config = (
        PPOConfig()
        .environment("tests.envs:MultiActionEnv", env_config={"kind": kind})
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=16)
        .training(
            train_batch_size=128, minibatch_size=64, num_epochs=4, lr=3e-3, model={"fcnet_hiddens": [32]}
        )
        .exploration(exploration_config={"type": "StochasticSampling", "random_timesteps": 128})
        .reporting(metrics_num_episodes_for_smoothing=16)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        policy = algo.get_policy()
        assert policy.dist_class.__name__.startswith("MultiCategorical")
        returns = [algo.train()["episode_return_mean"] for _ in range(40)]  # the env checks every action
        assert max(returns) >= 9.0, returns  # a random policy scores about 4.2 or 5
        env = algo.env_runner_group.local_worker().env.envs[0].unwrapped
        action = algo.compute_single_action(np.zeros(3, np.float32), explore=False)
        assert env.action_space.contains(action) and (action == env.target).all()
        logits, _ = policy.model({"obs": np.zeros((2, 3), np.float32)})
        dist = policy.dist_class(logits, policy.model)
        sample = dist.sample()
        assert sample.shape == (2, 2 if kind == "multi_discrete" else 3) and dist.logp(sample).shape == (2,)
        assert torch.allclose(dist.kl(dist), torch.zeros(2), atol=1e-6) and dist.entropy().shape == (2,)
    finally:
        algo.stop()
