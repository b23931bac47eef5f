"""RLlib's new-stack way to act with a trained network: ``algo.get_module()`` and
``RLModule.from_checkpoint(...)``, ``forward_inference({"obs": ...})`` and the module's action
distribution class, as RLlib's documents write it (imports changed)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.core.columns import Columns
from rltrainer.core.rl_module.rl_module import DEFAULT_MODULE_ID, RLModule
from rltrainer.env.multi_agent_examples import MultiAgentCartPole, policy_per_agent
from tests.tuned_ppo import train_to, tuned_ppo_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """The tuned PPO example trained (seed 0) to a mean return of 450, and its checkpoint."""
    algo = tuned_ppo_config(tmp_path_factory.mktemp("results")).build()
    train_to(algo, 450)
    checkpoint = algo.save(str(tmp_path_factory.mktemp("checkpoint")))
    yield algo, checkpoint
    algo.stop()


def greedy_return(module: RLModule, seed: int) -> float:
    """RLlib's deployment loop: forward_inference, then the most likely action."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        out = module.forward_inference({Columns.OBS: torch.from_numpy(obs).unsqueeze(0)})
        action = int(np.argmax(out[Columns.ACTION_DIST_INPUTS][0].numpy()))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    env.close()
    return total


def test_a_checkpoints_module_acts_as_trained_through_rllibs_path(trained) -> None:
    _, checkpoint = trained
    # RLlib's documented path of a module inside a checkpoint, and the checkpoint itself.
    module_path = Path(checkpoint) / "learner_group" / "learner" / "rl_module" / DEFAULT_MODULE_ID
    module = RLModule.from_checkpoint(module_path)
    assert module.module_id == DEFAULT_MODULE_ID and not module.is_stateful()
    returns = [greedy_return(module, seed) for seed in range(3)]
    assert np.mean(returns) >= 450, returns
    same = RLModule.from_checkpoint(checkpoint)
    for name, value in module.get_state().items():
        np.testing.assert_array_equal(same.get_state()[name], value)


def test_the_algorithms_module_agrees_with_its_policy(trained) -> None:
    algo, _ = trained
    module = algo.get_module()
    obs = np.random.default_rng(0).uniform(-0.2, 0.2, (32, 4)).astype(np.float32)
    logits = module.forward_inference({"obs": torch.from_numpy(obs)})["action_dist_inputs"]
    assert logits.shape == (32, 2) and not logits.requires_grad
    acted = algo.get_policy().compute(obs, explore=False)
    np.testing.assert_allclose(logits.numpy(), acted["action_dist_inputs"], atol=1e-5)
    # numpy observations and the distribution class, as RLlib's sampling loop writes it
    dist_cls = module.get_inference_action_dist_cls()
    assert dist_cls.__name__ == "TorchCategorical"
    greedy = dist_cls.from_logits(module.forward_exploration({"obs": obs})["action_dist_inputs"])
    actions = greedy.to_deterministic().sample().numpy()
    assert actions.tolist() == [algo.compute_single_action(row, explore=False) for row in obs]
    sampled = greedy.sample()
    assert set(sampled.tolist()) <= {0, 1} and greedy.logp(sampled).shape == (32,)
    train = module.forward_train({"obs": torch.from_numpy(obs)})
    assert train["vf_preds"].shape == (32,) and train["action_dist_inputs"].requires_grad


def test_set_state_on_the_algorithms_module_is_trained_on(trained, tmp_path) -> None:
    algo, _ = trained
    config = algo.config.copy(copy_frozen=False)
    config.update_from_dict({"lr": 0.0, "storage_path": str(tmp_path)})
    with config.build() as student:
        student.get_module().set_state(algo.get_module().get_state())
        student.train()
        learned = student.learner_group.get_weights()
    for name, value in algo.get_policy().get_weights().items():
        np.testing.assert_allclose(learned[name].numpy(), value, atol=1e-6)


def test_a_continuous_module_gives_its_distributions_inputs() -> None:
    with PPOConfig().environment("Pendulum-v1").build() as algo:
        module = algo.get_module()
        obs = np.zeros((5, 3), dtype=np.float32)
        inputs = module.forward_inference({"obs": torch.from_numpy(obs)})["action_dist_inputs"]
        assert inputs.shape == (5, 2)  # mean and log std of the one action dimension
        dist_cls = module.get_inference_action_dist_cls()
        assert dist_cls.__name__ == "TorchDiagGaussian"
        mean = dist_cls.from_logits(inputs).to_deterministic().sample()
        np.testing.assert_allclose(mean.numpy(), inputs[:, :1].numpy())


def test_bad_input_gets_one_message(trained, tmp_path) -> None:
    algo, _ = trained
    module = algo.get_module()
    with pytest.raises(ValueError, match=r'forward passes take \{"obs"'):
        module.forward_inference({"observations": torch.zeros(1, 4)})
    with pytest.raises(ValueError, match=r"does not fit Box.*leading batch axis"):
        module.forward_inference({"obs": torch.zeros(4)})
    with pytest.raises(KeyError, match="default_policy"):
        algo.get_module("main")
    two = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=policy_per_agent)
        .reporting(storage_path=str(tmp_path))
    )
    with two.build() as multi:
        path = multi.save(str(tmp_path / "checkpoint"))
        assert multi.get_module("p1").module_id == "p1"
    with pytest.raises(ValueError, match=r"holds the modules \['p0', 'p1'\]: name one"):
        RLModule.from_checkpoint(path)
    assert RLModule.from_checkpoint(path, module_id="p1").module_id == "p1"
    assert RLModule.from_checkpoint(Path(path) / "learner_group/learner/rl_module/p0").module_id == "p0"
