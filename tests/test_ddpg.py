"""DDPG and TD3: RLlib's defaults, the deterministic actor, delayed actor and target updates,
learning, checkpoints, remote env runners, the Trainer-era names and bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ddpg import DDPGConfig, TD3Config
from rltrainer.core.distributions import SquashedDeterministic
from rltrainer.errors import ConfigError, NumericalError

CONFIGS = {"DDPG": DDPGConfig, "TD3": TD3Config}


def tiny(tmp_path: Path, algo: str = "TD3", env: str = "Pendulum-v1", **training) -> DDPGConfig:
    return (
        CONFIGS[algo]()
        .environment(env)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=4)
        .training(
            **{
                "train_batch_size": 16,
                "num_steps_sampled_before_learning_starts": 16,
                "actor_hiddens": [16],
                "critic_hiddens": [16],
                "replay_buffer_config": {"capacity": 1000},
                **training,
            }
        )
        .exploration(exploration_config={"random_timesteps": 16})
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=48)
        .debugging(seed=0)
    )


def test_defaults_are_rllibs():
    ddpg, td3 = DDPGConfig(), TD3Config()
    assert (ddpg.twin_q, ddpg.policy_delay, ddpg.smooth_target_policy) == (False, 1, False)
    assert (td3.twin_q, td3.policy_delay, td3.smooth_target_policy) == (True, 2, True)
    assert ddpg.exploration_config["type"] == "OrnsteinUhlenbeckNoise" and ddpg.tau == 0.002
    assert td3.exploration_config["type"] == "GaussianNoise" and td3.tau == 0.005
    assert (td3.actor_hiddens, td3.critic_hiddens, td3.train_batch_size) == ([400, 300], [400, 300], 100)
    assert td3.replay_buffer_config["type"] == "ReplayBuffer" and ddpg.l2_reg == 1e-6 and td3.l2_reg == 0.0


def test_the_actor_is_tanh_of_its_inputs_and_logp_is_zero():
    inputs = torch.tensor([[0.3, -2.0]])
    dist = SquashedDeterministic(inputs)
    assert torch.equal(dist.sample(), torch.tanh(inputs)) and torch.equal(dist.logp(inputs), torch.zeros(1))
    actions, logp = SquashedDeterministic.sample_numpy(inputs.numpy(), True, np.random.default_rng(0))
    np.testing.assert_allclose(actions, np.tanh(inputs.numpy()), rtol=1e-6)
    assert logp.tolist() == [0.0]


@pytest.mark.parametrize("algo", ["DDPG", "TD3"])
def test_learns_to_reach_the_rescaled_target(tmp_path, algo):
    """ReachTargetEnv's best action is 2x the observation in a [-2, 2] Box: the actor (in
    [-1, 1]) must learn the identity and the env must get it rescaled."""
    config = tiny(tmp_path, algo, env="tests.envs:ReachTargetEnv", train_batch_size=64, gamma=0.0)
    config.training(actor_hiddens=[32], critic_hiddens=[64, 64], actor_lr=3e-3, critic_lr=3e-3, tau=0.05)
    config.training(training_intensity=64)  # one gradient step per env step
    config.exploration(exploration_config={"random_timesteps": 200})
    config.reporting(min_sample_timesteps_per_iteration=200)
    algo_ = config.env_runners(num_envs_per_env_runner=8, rollout_fragment_length=1).build()
    targets = np.linspace(-0.9, 0.9, 7, dtype=np.float32)
    try:
        for _ in range(15):  # 3,000 env steps at most; ~1,000 are usually enough
            algo_.train()
            actions = np.array(
                [algo_.compute_single_action(np.array([x]), explore=False)[0] for x in targets]
            )
            if np.abs(actions - 2 * targets).max() < 0.3:
                break
        np.testing.assert_allclose(actions, 2 * targets, atol=0.3)
    finally:
        algo_.stop()


def test_actor_and_targets_update_every_policy_delay_critic_steps(tmp_path):
    algo = tiny(tmp_path, policy_delay=3, tau=0.5).build()
    try:
        learner = algo.learner_group.local_learner
        algo.train()  # fills the buffer (and trains a few steps)
        batch = algo.replay_buffer.sample(16)
        actor, target = learner.params["actor"].data.clone(), learner.actor_target.data.clone()
        start = learner.num_critic_updates
        changes = []
        for _ in range(6):
            learner.update(batch, timestep=algo.counters.timesteps_total)
            now = learner.params["actor"].data
            changes.append((not torch.equal(now, actor), not torch.equal(learner.actor_target.data, target)))
            actor, target = now.clone(), learner.actor_target.data.clone()
        due = [(start + i + 1) % 3 == 0 for i in range(6)]
        assert changes == [(d, d) for d in due]
        trained = [n for n, p in learner.module.named_parameters() if "target" in n and p.requires_grad]
        assert not trained  # target networks are not trained by gradients
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("algo", "training"),
    [
        ("TD3", {}),
        ("DDPG", {}),  # one critic, l2_reg, an actor step per critic step
        (
            "TD3",
            {
                "use_huber": True,
                "huber_threshold": 0.01,
                "l2_reg": 1e-3,
                "grad_clip": 0.5,
                "actor_hidden_activation": "tanh",
                "critic_hiddens": [16, 8],
            },
        ),
    ],
)
def test_hand_written_gradients_match_autograd(tmp_path, algo, training):
    """The plain-MLP update without autograd takes the same steps as the autograd one."""
    algo_ = tiny(tmp_path, algo, **training).build()
    try:
        learner = algo_.learner_group.local_learner
        assert learner._by_hand and (learner._twins is not None) == (algo == "TD3")
        algo_.train()
        batch = algo_.replay_buffer.sample(16)
        tensors = [
            *(p.data for p in learner.params.values()),
            *(t for opt in learner.optimizers.values() for t in (opt.exp_avg, opt.exp_avg_sq)),
            learner.actor_target.data,
            learner.critic_target.data,
        ]
        start = [t.clone() for t in tensors]
        counters = (learner.num_critic_updates, *(opt.step_count for opt in learner.optimizers.values()))
        results = []
        for by_hand in (True, False):
            for t, value in zip(tensors, start, strict=True):
                t.copy_(value)
            learner.num_critic_updates = counters[0]
            for opt, count in zip(learner.optimizers.values(), counters[1:], strict=True):
                opt.step_count = count
            learner._by_hand = by_hand
            torch.manual_seed(0)  # the same target smoothing noise
            stats = [learner.update(batch, timestep=algo_.counters.timesteps_total) for _ in range(2)]
            results.append(([t.clone() for t in tensors], stats, learner.last_td_errors))
        (by_hand, by_hand_stats, by_hand_td), (autograd, autograd_stats, autograd_td) = results
        for a, b in zip(by_hand, autograd, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(by_hand_stats, autograd_stats, strict=True):
            np.testing.assert_allclose(list(a.values()), list(b.values()), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(by_hand_td, autograd_td, rtol=1e-5, atol=1e-6)
        assert not all(torch.equal(a, b) for a, b in zip(start, by_hand, strict=True))  # it did train
    finally:
        algo_.stop()


def test_a_one_output_layers_input_gradient_is_its_matrix_products_bits():
    """The backward passes take a one-output layer's input gradient as a broadcast product: the
    same bits as through the one-term matrix product (zeros included), for one MLP and twins."""
    from rltrainer.core.models import _DERIVATIVES, FastMLP, TwinMLP, mlp
    from rltrainer.core.optim import FlatParameters

    def bits(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous().view(torch.int32)

    torch.manual_seed(0)
    layers = [mlp([5, 8, 8, 1], "relu", out_gain=1.0) for _ in range(2)]
    flat = FlatParameters(torch.nn.ModuleList(layers))  # twins: one buffer, as the critics'
    nets = [FastMLP(net, "relu") for net in layers]
    twin = TwinMLP(*nets)
    grad = torch.randn(2, 32, 1)
    grad[:, :4] = 0.0
    derivative = _DERIVATIVES["relu"]
    with torch.no_grad():
        saved = twin.forward_saved(torch.randn(32, 5))
        twin.backward(saved, grad)
        got = flat.grad.clone()
        # the same passes with every input gradient a matrix product
        g = grad
        for i in range(2, -1, -1):
            if twin.activate[i]:
                g = derivative(g, saved[i + 1])
            torch.bmm(g.transpose(1, 2), saved[i], out=twin.grads[i][0])
            torch.sum(g, 1, out=twin.grads[i][1])
            g = g.bmm(twin.weights[i]) if i > 0 else g
        assert torch.equal(bits(got), bits(flat.grad))
        for n, net in enumerate(nets):
            one = net.forward_saved(saved[0][n])
            got = net.backward(one, grad[n], param_grads=False, input_grad=True)
            g = grad[n]
            for i in range(2, -1, -1):
                if net.activate[i]:
                    g = derivative(g, one[i + 1])
                g = g.mm(net.params[i][0])
            assert torch.equal(bits(got), bits(g))


@pytest.mark.parametrize("algo", ["DDPG", "TD3"])
def test_stats_are_computed_when_read_and_are_their_updates_own(tmp_path, algo):
    """An update's stats (DeferredStats) read after later updates are what reading them at once
    gives: they read no tensor a later update writes to."""
    algo_ = tiny(tmp_path, algo).build()
    try:
        learner = algo_.learner_group.local_learner
        algo_.train()
        batches = [algo_.replay_buffer.sample(16) for _ in range(3)]
        tensors = [
            *(p.data for p in learner.params.values()),
            *(t for opt in learner.optimizers.values() for t in (opt.exp_avg, opt.exp_avg_sq)),
            learner.actor_target.data,
            learner.critic_target.data,
        ]
        start = [t.clone() for t in tensors]
        counters = (learner.num_critic_updates, *(opt.step_count for opt in learner.optimizers.values()))
        read = []
        for at_once in (True, False):
            for t, value in zip(tensors, start, strict=True):
                t.copy_(value)
            learner.num_critic_updates = counters[0]
            for opt, count in zip(learner.optimizers.values(), counters[1:], strict=True):
                opt.step_count = count
            torch.manual_seed(0)
            stats = [learner.update(batch, timestep=algo_.counters.timesteps_total) for batch in batches]
            stats = [dict(s) for s in stats] if at_once else stats
            read.append([dict(s) for s in stats])
        assert read[0] == read[1]
        assert all(np.isfinite(list(s.values())).all() for s in read[0][1:])  # an actor step was taken
    finally:
        algo_.stop()


@pytest.mark.parametrize("algo", ["DDPG", "TD3"])
def test_checkpoint_round_trip(tmp_path, algo):
    trained = tiny(tmp_path, algo).build()
    try:
        trained.train()
        path = trained.save(str(tmp_path / "ckpt"))
        obs = np.array([1.0, 0.0, 0.5], np.float32)
        action = trained.compute_single_action(obs, explore=False)
        learner = trained.learner_group.local_learner
        steps = {name: opt.step_count for name, opt in learner.optimizers.items()}
        updates = learner.num_critic_updates
    finally:
        trained.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert type(restored).__name__ == algo
        np.testing.assert_array_equal(restored.compute_single_action(obs, explore=False), action)
        learner = restored.learner_group.local_learner
        assert {name: opt.step_count for name, opt in learner.optimizers.items()} == steps
        assert learner.num_critic_updates == updates
        assert -2.0 <= float(action[0]) <= 2.0
        restored.train()
    finally:
        restored.stop()


def test_a_non_finite_loss_skips_the_step_or_stops_naming_it(tmp_path):
    algo = tiny(tmp_path).debugging(on_nonfinite="skip_batch").build()
    try:
        learner = algo.learner_group.local_learner
        before = learner.params["critic"].data.clone()
        assert learner.step("critic", torch.tensor(float("nan"))) is False
        assert learner.skipped_steps == 1 and torch.equal(learner.params["critic"].data, before)
        learner.config = learner.config.copy(copy_frozen=False).debugging(on_nonfinite="stop")
        with pytest.raises(NumericalError, match=r"critic_loss=nan; lr 0.001"):
            learner.step("critic", torch.tensor(float("inf")) - float("inf"))
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("env", "training", "message"),
    [
        ("CartPole-v1", {}, "TD3 needs a 1-D Box action space (continuous actions), got Discrete(2)"),
        ("Pendulum-v1", {"actor_hiddens": [0]}, "actor_hiddens"),
        ("Pendulum-v1", {"critic_hidden_activation": "gelu"}, "critic_hidden_activation"),
        ("Pendulum-v1", {"policy_delay": 0}, "policy_delay"),
        ("Pendulum-v1", {"target_noise_clip": 0.0}, "target_noise_clip=0 clips all target smoothing noise"),
        ("Pendulum-v1", {"q_model_config": {}}, "training(): unknown key 'q_model_config'"),
    ],
)
def test_bad_input_is_one_config_error_naming_the_key(tmp_path, env, training, message):
    with pytest.raises(ConfigError) as err:
        tiny(tmp_path, env=env).training(**training).build()
    assert message in str(err.value)


def test_ddpg_and_td3_train_in_the_driver():
    with pytest.raises(ConfigError, match="TD3 trains in the driver: set num_learners=0"):
        TD3Config().environment("Pendulum-v1").resources(num_learners=1).validate()


def test_trainer_era_names():
    import rltrainer.agents.ddpg as ddpg
    from rltrainer.agents.ddpg.td3 import TD3_DEFAULT_CONFIG, TD3Trainer

    assert ddpg.DDPGTrainer.__name__ == "DDPG" and TD3Trainer is ddpg.TD3Trainer
    assert ddpg.DEFAULT_CONFIG["policy_delay"] == 1 and TD3_DEFAULT_CONFIG["policy_delay"] == 2
    config = dict(TD3_DEFAULT_CONFIG, actor_hiddens=[8], critic_hiddens=[8])
    assert TD3Config.from_dict(config).twin_q is True
