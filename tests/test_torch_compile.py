"""``torch_compile_learner`` / ``torch_compile_worker``: real ``torch.compile`` of learners and
env-runner inference (``rltrainer.core.torch_compile``).

Most tests compile through a counting backend (registered with dynamo, so the config accepts
its name): it runs the captured graphs as they are, so results match eager torch exactly and
the test can count compilations. One test runs inductor end to end (C++ code generation,
about 20 s here); the GPU figures are in the README ("torch.compile").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._dynamo import register_backend

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.appo import APPOConfig
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.es import ESConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.errors import ConfigError

GRAPHS: list[int] = []  # one entry per graph dynamo handed to the backend


@register_backend
def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:  # noqa: ARG001
    GRAPHS.append(len(gm.graph.nodes))
    return gm.forward


def ppo(**framework) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=64)
        .training(train_batch_size=256, minibatch_size=64, num_epochs=2)
        .framework("torch", **framework)
        .debugging(seed=0)
    )


def train(config, iterations: int = 2):
    algo = config.build()
    try:
        results = [algo.train() for _ in range(iterations)]
        weights = algo.get_policy().get_weights()
    finally:
        algo.stop()
    return results, weights


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    GRAPHS.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("what", ["forward_train", "complete_update"])
def test_compiled_ppo_learner_trains_as_eager_torch(what):
    """The same seed gives the same weights whether or not the learner's graphs are compiled."""
    results, compiled = train(
        ppo(
            torch_compile_learner=True,
            torch_compile_learner_dynamo_backend="counting",
            torch_compile_learner_what_to_compile=what,
        ),
        iterations=3,
    )
    assert GRAPHS, "nothing was compiled"
    _, eager = train(ppo(), iterations=3)
    assert_same_weights(eager, compiled)
    assert results[-1]["episode_reward_mean"] > 0


def test_a_changing_kl_coefficient_does_not_recompile_the_loss():
    """PPO adapts kl_coeff after every update; the compiled loss reads it as a tensor, so only
    the two variants (with and without diagnostics) are ever compiled."""
    results, _ = train(
        ppo(
            torch_compile_learner=True,
            torch_compile_learner_dynamo_backend="counting",
            torch_compile_learner_what_to_compile="complete_update",
        ).training(kl_target=1e-6),  # far below any real KL: the coefficient grows every update
        iterations=4,
    )
    coefficients = [r["cur_kl_coeff"] for r in results]
    assert len(set(coefficients)) == 4
    counted = len(GRAPHS)
    assert counted <= 4  # forward and backward of the two variants


def test_compiled_sac_learner_compiles_actor_and_critics():
    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32)
        .reporting(min_sample_timesteps_per_iteration=100)
        .framework("torch", torch_compile_learner=True, torch_compile_learner_dynamo_backend="counting")
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        learner = algo.learner_group.local_learner
        compiled = [m for m in learner.compiled_modules() if m._compiled_call_impl is not None]
        assert len(compiled) == 3  # the actor and two critics
        result = algo.train()
        assert result["num_env_steps_trained"] > 0
        assert GRAPHS
        # Compiling in place keeps the parameter names: weights and checkpoints are unchanged.
        assert not any("_orig_mod" in name for name in learner.module.state_dict())
    finally:
        algo.stop()


def test_compiled_worker_acts_as_numpy_inference(tmp_path):
    """A runner with torch_compile_worker acts through one compiled torch call per batch and
    picks the actions numpy inference picks; its checkpoint restores without compiling."""
    config = ppo(torch_compile_worker=True, torch_compile_worker_dynamo_backend="counting")
    algo = config.build()
    try:
        algo.train()
        policy = algo.get_policy()
        assert policy._samples_from_mlp is False  # the torch call, not numpy's fused MLP
        assert GRAPHS
        obs = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
        compiled_actions = [algo.compute_single_action(o, explore=False) for o in obs]
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    plain = Algorithm.from_checkpoint(path, config_overrides={"torch_compile_worker": False})
    try:
        assert plain.get_policy()._compile_kwargs is None
        assert [plain.compute_single_action(o, explore=False) for o in obs] == compiled_actions
    finally:
        plain.stop()


def test_compiled_recurrent_worker_steps_its_lstm():
    config = ppo(torch_compile_worker=True, torch_compile_worker_dynamo_backend="counting").training(
        model={"use_lstm": True, "lstm_cell_size": 16, "max_seq_len": 8, "fcnet_hiddens": [16]}
    )
    results, _ = train(config, iterations=1)
    assert GRAPHS and results[0]["num_env_steps_sampled"] >= 256


def test_inductor_end_to_end():
    """The default backend: C++ generated and built for the learner's loss and the runner."""
    results, _ = train(
        ppo(
            torch_compile_learner=True,
            torch_compile_learner_what_to_compile="complete_update",
            torch_compile_worker=True,
        ),
        iterations=2,
    )
    assert np.isfinite(results[-1]["total_loss"])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            ppo(torch_compile_learner=True, torch_compile_learner_dynamo_backend="onnxrt"),
            "torch_compile_learner_dynamo_backend: unknown torch.compile backend 'onnxrt'; this torch",
        ),
        (
            ppo(
                torch_compile_worker=True,
                torch_compile_worker_dynamo_backend="aot_eager",
                torch_compile_worker_dynamo_mode="reduce-overhead",
            ),
            "torch_compile_worker_dynamo_mode='reduce-overhead': torch.compile modes are inductor's",
        ),
        (
            SACConfig()
            .environment("Pendulum-v1")
            .framework(torch_compile_learner=True, torch_compile_learner_what_to_compile="complete_update"),
            "SACLearner has no per-minibatch loss to compile",
        ),
        (
            ESConfig().environment("CartPole-v1").framework(torch_compile_learner=True),
            "DerivativeFreeLearner takes no gradient steps",
        ),
    ],
    ids=["unknown-backend", "mode-without-inductor", "sac-complete-update", "es"],
)
def test_bad_compile_settings_fail_at_build(config, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config.build()


def test_bad_values_are_refused_by_the_config():
    with pytest.raises(ConfigError, match="torch_compile_learner_what_to_compile"):
        PPOConfig().framework(torch_compile_learner_what_to_compile="everything")
    with pytest.raises(ConfigError, match="torch_compile_worker_dynamo_mode"):
        PPOConfig().framework(torch_compile_worker_dynamo_mode="fastest")


def test_inductor_without_a_cpp_compiler_says_what_to_do(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda _name: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ConfigError, match="no C\\+\\+ compiler was found.*'aot_eager'"):
        ppo(torch_compile_learner=True).build()


def test_documents_keys_round_trip_through_the_dict():
    config = APPOConfig().framework(
        torch_compile_learner=True, torch_compile_learner_dynamo_mode="max-autotune"
    )
    again = APPOConfig.from_dict(config.to_dict())
    assert again.torch_compile_learner and again.torch_compile_learner_dynamo_mode == "max-autotune"
    assert DQNConfig()["torch_compile_worker"] is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_on_a_gpu():
    """Inductor's Triton kernels: the GPU learner's loss and the GPU runner's inference."""
    results, _ = train(
        ppo(
            torch_compile_learner=True,
            torch_compile_learner_what_to_compile="complete_update",
            torch_compile_worker=True,
        ).resources(num_gpus=1, num_gpus_per_env_runner=1),
        iterations=2,
    )
    assert np.isfinite(results[-1]["total_loss"])
