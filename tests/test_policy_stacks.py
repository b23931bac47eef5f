"""Several policies' actions in one compiled call (``rltrainer.env.policy_stacks``): the same
actions and log-probabilities as each policy's own ``compute``, fresh after weights change, and a
multi-agent runner that samples the same fragment with and without stacks."""

from __future__ import annotations

import numpy as np
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.core import compiled
from rltrainer.env import multi_agent_env_runner
from rltrainer.env.multi_agent_examples import MultiAgentCartPole, policy_per_agent
from rltrainer.env.policy_stacks import build_stacks, eligible, observation_groups

pytestmark = pytest.mark.skipif(compiled.kernels() is None, reason="numba is not installed")


def per_agent_config(tmp_path, agents: int = 3) -> PPOConfig:
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": agents})
        .env_runners(rollout_fragment_length=40)
        .training(train_batch_size=40, minibatch_size=20, num_epochs=1)
        .reporting(storage_path=str(tmp_path))
        .multi_agent(policies={f"p{i}" for i in range(agents)}, policy_mapping_fn=policy_per_agent)
        .debugging(seed=3)
    )


def twins(tmp_path, agents: int = 3):
    """Two runners' policy maps with the same seeds and weights."""
    algos = [per_agent_config(tmp_path / name, agents).build() for name in ("a", "b")]
    maps = [algo.env_runner_group.local_worker().policy_map for algo in algos]
    return algos, maps


@pytest.mark.parametrize("explore", [True, False])
def test_a_stack_acts_as_each_policy_alone(tmp_path, explore):
    algos, (stacked, alone) = twins(tmp_path)
    try:
        where = build_stacks(stacked)
        assert set(where) == set(stacked) and all(eligible(p) for p in stacked.values())
        stack = where["p0"][0]
        rng = np.random.default_rng(0)
        for _ in range(5):
            counts = {"p0": 2, "p2": 1, "p1": 3}
            rows = {pid: rng.standard_normal((n, 4)).astype(np.float32) for pid, n in counts.items()}
            starts = np.cumsum([0, *counts.values()]).tolist()
            slots = [where[pid][1] for pid in counts]
            actions, logp = stack.compute(np.concatenate(list(rows.values())), starts, slots, explore)
            for k, pid in enumerate(counts):
                out = alone[pid].compute(rows[pid], explore)
                assert np.array_equal(actions[starts[k] : starts[k + 1]], out["actions"])
                np.testing.assert_allclose(logp[starts[k] : starts[k + 1]], out["action_logp"], atol=1e-5)
    finally:
        for algo in algos:
            algo.stop()


def test_a_stack_sees_new_weights(tmp_path):
    algos, (stacked, alone) = twins(tmp_path)
    try:
        stack, slot = build_stacks(stacked)["p1"]
        rows = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
        stack.compute(rows, [0, 4], [slot], explore=False)
        new = {k: v * 3.0 for k, v in stacked["p0"].get_weights().items()}
        stacked["p1"].set_weights(new)
        alone["p1"].set_weights(new)
        _, logp = stack.compute(rows, [0, 4], [slot], explore=False)
        np.testing.assert_allclose(logp, alone["p1"].compute(rows, False)["action_logp"], atol=1e-5)
    finally:
        for algo in algos:
            algo.stop()


def test_policies_that_cannot_be_stacked_keep_their_own_compute(tmp_path):
    algo = per_agent_config(tmp_path).build()
    try:
        policies = algo.env_runner_group.local_worker().policy_map
        policies["p2"].custom_compute = True  # e.g. a heuristic opponent's compute_actions
        assert set(build_stacks(policies)) == {"p0", "p1"}
        policies["p1"].custom_compute = True
        assert build_stacks(policies) == {}  # a lone policy gains nothing
        assert set(observation_groups(policies)) == {"p0", "p1", "p2"}  # one CartPole space
    finally:
        algo.stop()


def test_a_runner_samples_the_same_fragment_with_and_without_stacks(tmp_path, monkeypatch):
    batches = []
    for name, stacks in (("stacked", True), ("alone", False)):
        if not stacks:
            monkeypatch.setattr(multi_agent_env_runner, "build_stacks", lambda _policy_map: {})
            monkeypatch.setattr(multi_agent_env_runner, "observation_groups", lambda _policy_map: {})
        algo = per_agent_config(tmp_path / name).build()
        try:
            runner = algo.env_runner_group.local_worker()
            runner.sample()
            assert bool(runner._stacks) == stacks
            algo.train()  # new weights reach the runner's policies (set_weights)
            batches.append(runner.sample()[0])
        finally:
            algo.stop()
    stacked, alone = batches
    assert (
        stacked.agent_steps == alone.agent_steps
        and stacked.policy_batches.keys() == alone.policy_batches.keys()
    )
    for pid, rollout in stacked.policy_batches.items():
        other = alone.policy_batches[pid]
        assert np.array_equal(rollout.actions, other.actions)
        np.testing.assert_allclose(rollout.obs, other.obs, atol=1e-6)
        np.testing.assert_allclose(rollout.action_logp, other.action_logp, atol=1e-5)


def _sac_per_agent_config(tmp_path, agents: int = 3):
    from rltrainer.algorithms.sac import SACConfig

    return (
        SACConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": agents})
        .env_runners(rollout_fragment_length=40)
        .training(num_steps_sampled_before_learning_starts=40, train_batch_size=32)
        .reporting(storage_path=str(tmp_path))
        .multi_agent(policies={f"p{i}" for i in range(agents)}, policy_mapping_fn=policy_per_agent)
        .debugging(seed=3)
    )


@pytest.mark.parametrize("make_config", [per_agent_config, _sac_per_agent_config], ids=["PPO", "SAC"])
def test_stacks_act_with_what_the_learners_hold_after_each_update(tmp_path, make_config):
    """Sampled and trained in the driver, the policies act with the learners' modules themselves
    (no weights copied); the learners' optimizers write their flat buffers, which bumps no
    parameter's version counter, and the stacks' copies must follow all the same."""
    algo = make_config(tmp_path).build()
    try:
        runner = algo.env_runner_group.local_worker()
        learners = algo.learner_group.local_learners
        rows = np.random.default_rng(2).standard_normal((4, 4)).astype(np.float32)
        first = {pid: runner.policy_map[pid].get_weights() for pid in learners}
        for _ in range(3):
            algo.train()
            for pid, learner in learners.items():
                policy = runner.policy_map[pid]
                assert policy.model is learner.module
                stack, slot = runner._policy_stacks()[pid]
                _, logp = stack.compute(rows, [0, 4], [slot], explore=False)
                np.testing.assert_allclose(logp, policy.compute(rows, False)["action_logp"], atol=1e-5)
        moved = [
            name
            for pid in learners
            for name, value in runner.policy_map[pid].get_weights().items()
            if not np.array_equal(value, first[pid][name])
        ]
        assert moved, "nothing learned: the test would pass with stale copies"
    finally:
        algo.stop()
