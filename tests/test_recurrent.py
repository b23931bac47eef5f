"""LSTM policies (``model={"use_lstm": True}``): state through sampling, sequences in the
learner, the documents' RNN calls, and a memory task only a recurrent policy solves."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.env.memory_envs import RepeatAfterMeEnv, StatelessCartPole
from rltrainer.errors import ConfigError
from tests.envs import BrightSideEnv, FixedLengthEnv, MaskedChoiceEnv


class ShortPendulum(gym.Wrapper):
    """Pendulum-v1 truncated at 13 steps (Box actions, episodes ending inside sequences)."""

    def __init__(self, config=None):  # noqa: ARG002
        super().__init__(gym.wrappers.TimeLimit(gym.make("Pendulum-v1").unwrapped, 13))


LSTM = {"use_lstm": True, "lstm_cell_size": 16, "fcnet_hiddens": [16], "max_seq_len": 8}


def lstm_config(env=RepeatAfterMeEnv, model=None, **training) -> PPOConfig:
    settings = {"train_batch_size": 128, "minibatch_size": 32, "num_epochs": 2, **training}
    return (
        PPOConfig()
        .environment(env, env_config={"episode_len": 13, "length": 13})
        .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=32)
        .training(model={**LSTM, **(model or {})}, **settings)
        .debugging(seed=0)
    )


def replay(algo: Algorithm, rollout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The learner's log-probabilities and values of the rollout's valid steps, and the sampler's."""
    learner = algo.learner_group._local
    batch = learner.build_batch([rollout])
    data = type(batch)(*(None if column is None else learner.to_tensor(column) for column in batch))
    with torch.no_grad():
        dist_inputs, values, steps = learner.forward_minibatch(data)
        logp = learner.dist_class(dist_inputs).log_prob(steps.actions)
    return logp.numpy(), steps.action_logp.numpy(), values.numpy(), steps.vf_preds.numpy()


@pytest.mark.parametrize(
    ("env", "model"),
    [
        (RepeatAfterMeEnv, {}),
        (RepeatAfterMeEnv, {"lstm_use_prev_action": True, "lstm_use_prev_reward": True}),
        (ShortPendulum, {"lstm_use_prev_action": True}),  # Box actions, truncated episodes
        (BrightSideEnv, {"conv_filters": [[4, [5, 5], 5], [8, [2, 2], 1]]}),  # uint8 frames
        (MaskedChoiceEnv, {}),
    ],
)
def test_the_learner_replays_the_samplers_steps_exactly(env, model):
    """Sequences of 8 steps over 13-step episodes (resets inside sequences, state carried
    across sequences and fragments): the learner's log-probabilities and values before any
    update are the sampler's, so PPO's first ratio is 1."""
    algo = lstm_config(env, model).build()
    runner = algo.env_runner_group.local_worker()
    for _ in range(3):  # later fragments start from carried states
        rollout, _ = runner.sample()
    assert rollout.recurrent.state_resets.any()
    assert np.abs(rollout.recurrent.state_in[0]).sum() > 0  # carried, not zeros
    batch = algo.learner_group._local.build_batch([rollout])
    assert not batch.resets[:, 1:].any()  # split where episodes begin: one LSTM call per batch
    logp, sampled_logp, values, sampled_values = replay(algo, rollout)
    assert len(logp) == rollout.num_steps
    np.testing.assert_allclose(logp, sampled_logp, atol=2e-5)
    np.testing.assert_allclose(values, sampled_values, atol=2e-5)
    algo.train()
    algo.stop()


def test_state_is_carried_across_fragments_and_zeroed_where_episodes_begin():
    algo = lstm_config().build()
    runner = algo.env_runner_group.local_worker()
    first, _ = runner.sample()
    carried = runner._recurrent.state.copy()
    second, _ = runner.sample()
    np.testing.assert_array_equal(second.recurrent.state_in[0], carried)
    # With next-step autoreset the step after an episode's end is a reset step (invalid); the
    # episode after it starts from zeros: a reset is flagged right after each invalid step.
    for rollout in (first, second):
        invalid_before = np.zeros_like(rollout.valid)
        invalid_before[1:] = ~rollout.valid[:-1]
        np.testing.assert_array_equal(rollout.recurrent.state_resets[1:], invalid_before[1:])
    steps = len(second.valid)  # 32 valid steps per env, plus reset steps
    assert second.recurrent.state_in.shape == (
        -(-steps // 8),
        4,
        4,
        16,
    )  # sequences, envs, [h, c, vf h, vf c]
    algo.stop()


def test_an_lstm_solves_a_memory_task_an_mlp_cannot():
    """RepeatAfterMe: +1 for naming the bit shown one step ago, -1 otherwise; 19 at best,
    0 on average for any memoryless policy. The LSTM reaches 8 within the budget (about
    iteration 9 of 25); the MLP gets all 25 iterations to show it cannot."""

    def train(model: dict, stop_at: float = float("inf")) -> float:
        algo = (
            PPOConfig()
            .environment(RepeatAfterMeEnv)
            .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
            .training(
                lr=1e-2, train_batch_size=256, minibatch_size=128, num_epochs=4,
                entropy_coeff=0.0, vf_loss_coeff=0.5, model={"fcnet_hiddens": [32], **model},
            )
            .debugging(seed=0)
            .build()
        )  # fmt: skip
        for _ in range(25):
            result = algo.train()
            if result["episode_return_mean"] >= stop_at:
                break
        algo.stop()
        return result["episode_return_mean"]

    assert train({"use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 20}, stop_at=8.0) >= 8.0
    assert train({}) <= 3.0


@pytest.mark.parametrize(("share", "rows"), [(True, 2), (False, 4)])
def test_compute_single_action_takes_and_returns_the_state(share, rows):
    """``[h, c]``; with the value function's own LSTM (``vf_share_layers=False``) its h and c follow."""
    algo = lstm_config(StatelessCartPole, {"vf_share_layers": share}).build()
    policy = algo.get_policy()
    assert policy.is_recurrent()
    state = policy.get_initial_state()
    assert [part.shape for part in state] == [(16,)] * rows and not np.any(state)
    env = StatelessCartPole()
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        action, state, extra = algo.compute_single_action(obs, state, explore=False)
        obs, *_ = env.step(action)
    assert [part.shape for part in state] == [(16,)] * rows and state[0].any()
    assert set(extra) == {"action_logp", "action_dist_inputs", "vf_preds"}
    # the documents' model call, on a batch of two
    logits, state_out = policy.model({"obs": np.stack([obs, obs])}, [np.stack([part] * 2) for part in state])
    assert logits.shape == (2, 2) and len(state_out) == rows and state_out[0].shape == (2, 16)
    assert policy.model.value_function().shape == (2,)
    # without a state: the initial one, and still the RNN form
    action, state_out, _ = algo.compute_single_action(obs)
    assert len(state_out) == rows
    actions, states, _ = algo.compute_actions([obs, obs], state=[np.zeros((2, 16))] * rows, explore=False)
    assert len(actions) == 2 and states[0].shape == (2, 16)
    action, policy_state, _ = policy.compute_single_action(obs, state, explore=False)
    assert action == algo.compute_single_action(obs, state, explore=False)[0]
    assert [part.shape for part in policy_state] == [(16,)] * rows
    with pytest.raises(ConfigError, match=r"LSTM state is \[h, c.*\] with 16 values each"):
        algo.compute_single_action(obs, [np.zeros(8)] * rows)
    with pytest.raises(ConfigError, match=r"a list of equally shaped arrays"):
        algo.compute_single_action(obs, [np.zeros(16), np.zeros(8)])
    algo.stop()


def test_prev_action_and_reward_reach_the_lstm():
    algo = lstm_config(model={"lstm_use_prev_action": True, "lstm_use_prev_reward": True}).build()
    state = algo.get_policy().get_initial_state()
    outs = {
        (action, reward): algo.compute_single_action(
            0, state, prev_action=action, prev_reward=reward, full_fetch=True
        )[2]
        for action, reward in [(0, 0.0), (1, 0.0), (0, 1.0)]
    }
    logits = [tuple(extra["action_dist_inputs"]) for extra in outs.values()]
    assert len(set(logits)) == 3
    algo.stop()


def test_checkpoints_restore_the_lstm(tmp_path):
    algo = lstm_config(StatelessCartPole).build()
    algo.train()
    path = algo.save(str(tmp_path / "ckpt"))
    obs = np.array([0.01, -0.02], np.float32)
    state = algo.get_policy().get_initial_state()
    expected = algo.compute_single_action(obs, state, explore=False, full_fetch=True)
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    got = restored.compute_single_action(obs, state, explore=False, full_fetch=True)
    assert got[0] == expected[0]
    np.testing.assert_allclose(got[1][0], expected[1][0], atol=1e-6)
    restored.stop()


def test_lstm_policies_evaluate_and_train_in_complete_episodes():
    algo = (
        lstm_config(FixedLengthEnv)
        .env_runners(batch_mode="complete_episodes")
        .evaluation(evaluation_interval=1, evaluation_duration=4)
        .build()
    )
    result = algo.train()
    assert np.isfinite(result["evaluation"]["episode_return_mean"])  # episodes ran with the state
    assert result["num_env_steps_sampled"] >= 128
    algo.stop()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            DQNConfig().environment("CartPole-v1").training(model={"use_lstm": True}),
            r"model.use_lstm: DQN has no recurrent models",
        ),
        (
            SACConfig().environment("Pendulum-v1").training(model={"use_lstm": True}),
            r"model.use_lstm: SAC has no recurrent models",
        ),
        (
            PPOConfig()
            .environment("CartPole-v1")
            .training(model={"use_lstm": True, "custom_model": "tests.test_models:TinyModel"}),
            r"use_lstm wraps the built-in encoders; a custom_model keeps its own state",
        ),
    ],
)
def test_lstm_where_it_cannot_be_used_fails_at_build(config, message):
    with pytest.raises(ConfigError, match=message):
        config.build()


def test_lstm_with_remote_runners_and_two_learners(local_ray):  # noqa: ARG001
    algo = (
        lstm_config(StatelessCartPole)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .resources(num_learners=2)
        .build()
    )
    for _ in range(2):
        result = algo.train()
    assert result["num_env_steps_sampled"] >= 128
    assert np.isfinite(result["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"])
    algo.stop()


def test_the_tuned_lstm_example_trains_from_the_cli(tmp_path, capsys):
    from pathlib import Path

    from rltrainer.cli import main

    yaml_file = Path(__file__).resolve().parent.parent / "tuned_examples/ppo_stateless_cartpole_lstm.yaml"
    argv = [
        "train",
        "file",
        str(yaml_file),
        "--stop",
        '{"training_iteration": 2}',
        "--storage-path",
        str(tmp_path),
        "--checkpoint-at-end",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    (checkpoint,) = tmp_path.glob("stateless-cartpole-lstm-ppo/*/checkpoint_*")
    assert main(["evaluate", str(checkpoint), "--episodes", "2"]) == 0, capsys.readouterr().err
