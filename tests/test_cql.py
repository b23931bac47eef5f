"""CQL: RLlib's defaults, the conservative penalty against a hand computation and its effect,
behaviour cloning for ``bc_iters`` steps, the Lagrangian ``alpha_prime`` in checkpoints, what
is refused, and learning Pendulum from a recorded SAC run (offline only)."""

from __future__ import annotations

import logging
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.cql import CQL, CQLConfig
from rltrainer.algorithms.registry import get_algorithm_class, get_config_class
from rltrainer.algorithms.sac import SACConfig
from rltrainer.core.distributions import SquashedGaussian
from rltrainer.errors import ConfigError
from rltrainer.utils.replay_buffers import ReplayBatch

ROOT = Path(__file__).resolve().parent.parent


def tiny(tmp_path: Path, **training) -> CQLConfig:
    return (
        CQLConfig()
        .environment("Pendulum-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=4)
        .training(
            **{
                "train_batch_size": 16,
                "num_steps_sampled_before_learning_starts": 16,
                "q_model_config": {"fcnet_hiddens": [16]},
                "policy_model_config": {"fcnet_hiddens": [16]},
                "replay_buffer_config": {"capacity": 1000},
                "num_actions": 3,
                **training,
            }
        )
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=48)
        .debugging(seed=0)
    )


def fixed_batch(size: int, action: float, seed: int = 0) -> ReplayBatch:
    """Pendulum-shaped transitions whose recorded action is always ``action``; every one ends
    the episode with reward 0, so the Bellman target of the data actions is 0."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (size, 3)).astype(np.float32)
    columns = {
        "obs": obs,
        "next_obs": obs,
        "actions": np.full((size, 1), action, np.float32),
        "rewards": np.zeros(size, np.float32),
        "terminateds": np.ones(size, np.float32),
        "discounts": np.full(size, 0.99, np.float32),
        "weights": np.ones(size, np.float32),
        "indices": np.arange(size),
    }
    return ReplayBatch(**{name: columns.get(name) for name in ReplayBatch._fields})


def test_defaults_are_rllibs():
    config = CQLConfig()
    cql = (config.bc_iters, config.temperature, config.num_actions, config.lagrangian)
    assert cql == (20_000, 1.0, 10, False)
    assert (config.lagrangian_thresh, config.min_q_weight, config.deterministic_backup) == (5.0, 5.0, True)
    assert isinstance(config, SACConfig) and config.twin_q and config.tau == 0.005  # the rest is SAC's
    assert get_config_class("cql") is CQLConfig and get_algorithm_class("CQL") is CQL
    assert {"cql_loss", "alpha_prime_value", "critic_loss"} <= set(CQL.result_keys())

    import rltrainer.agents.cql as agents

    assert agents.CQLTrainer is CQL and agents.CQL is CQL and agents.CQLConfig is CQLConfig
    default = agents.DEFAULT_CONFIG
    assert default == CQLConfig().to_dict() and default["bc_iters"] == 20_000  # noqa: SIM300
    assert CQLConfig.from_dict(default).to_dict() == default


def test_penalty_matches_a_hand_computation(tmp_path):
    algo = tiny(tmp_path, temperature=0.5, min_q_weight=2.0).build()
    learner = algo.learner_group.local_learner
    algo.stop()
    torch.manual_seed(0)
    obs, actions = torch.randn(3, 3), torch.rand(3, 1) * 2 - 1
    sampled, offsets = torch.rand(3, 4, 1) * 2 - 1, torch.randn(3, 4)
    q = learner.module.q1
    q_data, penalty = learner.penalized_q(q, obs, actions, sampled, offsets)

    def value(i: int, action: torch.Tensor) -> float:  # one (state, action) pair at a time
        with torch.no_grad():
            return q(obs[i : i + 1], action.reshape(1, 1)).item()

    data = [value(i, actions[i]) for i in range(3)]
    logsumexp = [
        0.5
        * math.log(sum(math.exp((value(i, sampled[i, j]) - offsets[i, j].item()) / 0.5) for j in range(4)))
        for i in range(3)
    ]
    assert q_data.tolist() == pytest.approx(data, rel=1e-5, abs=1e-6)
    assert penalty.item() == pytest.approx(2.0 * (np.mean(logsumexp) - np.mean(data)), rel=1e-5, abs=1e-6)


def test_penalty_samples_and_their_densities(tmp_path):
    algo = tiny(tmp_path).build()  # num_actions=3
    learner = algo.learner_group.local_learner
    algo.stop()
    torch.manual_seed(0)
    pi_inputs, next_inputs = torch.randn(5, 2) * 0.5, torch.randn(5, 2) * 0.5
    sampled, offsets = learner.sample_penalty_actions(pi_inputs, next_inputs)
    assert sampled.shape == (5, 9, 1) and offsets.shape == (5, 9) and sampled.abs().max() <= 1
    # uniform over [-1, 1]: density 1/2; the policy's samples: their own log-density
    np.testing.assert_allclose(offsets[:, :3], -math.log(2.0))
    for inputs, part in ((pi_inputs, slice(3, 6)), (next_inputs, slice(6, 9))):
        dist = SquashedGaussian(inputs[:, None].expand(5, 3, 2))
        np.testing.assert_allclose(offsets[:, part], dist.log_prob(sampled[:, part]), rtol=1e-4, atol=1e-3)


def test_penalty_pushes_unseen_actions_down(tmp_path):
    """On a fixed batch whose recorded action is always 0.5 (target 0), CQL's critics end up
    valuing 0.5 well above actions it never saw; without the penalty they do not."""
    batch = fixed_batch(64, 0.5)
    obs = torch.from_numpy(batch.obs)
    gaps = {}
    for weight in (0.0, 5.0):
        algo = tiny(
            tmp_path,
            min_q_weight=weight,
            bc_iters=0,
            train_batch_size=64,
            q_model_config={"fcnet_hiddens": [32, 32]},
            optimization_config={"critic_learning_rate": 1e-3},
        ).build()
        learner = algo.learner_group.local_learner
        algo.stop()
        for _ in range(200):
            stats = learner.update_from_batch(batch, timestep=0)
        assert np.isfinite(stats["cql_loss"])
        with torch.no_grad():
            q_data = learner.module.q1(obs, torch.full((64, 1), 0.5)).mean()
            unseen = [learner.module.q1(obs, torch.full((64, 1), a)).mean() for a in (-1.0, -0.5, 0.0, 1.0)]
        gaps[weight] = (q_data - torch.stack(unseen).mean()).item()
    assert gaps[5.0] > 2.0 and abs(gaps[0.0]) < 0.5, gaps  # measured: 5.0 and 0.06


@pytest.mark.parametrize("twin_q", [True, False])
@pytest.mark.parametrize("deterministic_backup", [True, False])
def test_bellman_loss_matches_a_hand_computation(tmp_path, twin_q, deterministic_backup):
    """Without the penalty the critic loss is ``sum_i mean(w (Q_i(s, a) - y)^2)`` (RLlib's MSE,
    no 1/2), ``y = r + gamma^k (1 - terminated) (min_i Q'_i(s', a') [- alpha log pi(a'|s')])``
    with a' from the current policy and the *target* critics; RLlib's CQL always drops the
    entropy term (``deterministic_backup``)."""
    settings = {"twin_q": twin_q, "deterministic_backup": deterministic_backup, "initial_alpha": 0.5}
    algo = tiny(tmp_path, min_q_weight=0.0, **settings).build()
    learner = algo.learner_group.local_learner
    algo.stop()
    m = learner.module
    torch.manual_seed(0)
    learner.target.data.add_(0.1 * torch.randn_like(learner.target.data))  # targets != online critics
    rng = np.random.default_rng(1)
    n = 16
    batch = ReplayBatch(
        obs=rng.standard_normal((n, 3)).astype(np.float32),
        actions=rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        rewards=rng.standard_normal(n).astype(np.float32),
        next_obs=rng.standard_normal((n, 3)).astype(np.float32),
        terminateds=(np.arange(n) % 4 == 0).astype(np.float32),
        discounts=np.where(np.arange(n) % 2 == 0, 0.99, 0.99**3).astype(np.float32),  # n-step rows
        weights=rng.uniform(0.5, 1.5, n).astype(np.float32),
        indices=np.arange(n),
    )
    obs, actions, next_obs = (torch.from_numpy(x) for x in (batch.obs, batch.actions, batch.next_obs))
    torch.manual_seed(7)  # the update's first draw is a' ~ pi(.|s')
    with torch.no_grad():
        next_actions, next_logp = SquashedGaussian(m.pi(next_obs)).rsample_with_logp()
        v_next = m.q1_target(next_obs, next_actions)
        if twin_q:
            v_next = torch.minimum(v_next, m.q2_target(next_obs, next_actions))
        if not deterministic_backup:
            v_next = v_next - 0.5 * next_logp
        bootstrap = torch.from_numpy(batch.discounts * (1 - batch.terminateds))
        y = torch.from_numpy(batch.rewards) + bootstrap * v_next
        w = torch.from_numpy(batch.weights)
        expected = sum((w * (q(obs, actions) - y) ** 2).mean() for q in m.critics()).item()
    torch.manual_seed(7)
    stats = learner.update_from_batch(batch, timestep=0)
    assert stats["critic_loss"] == pytest.approx(expected, rel=1e-5)
    assert stats["cql_loss"] == 0.0 and stats["alpha_value"] == pytest.approx(0.5)


def test_bc_iters_switch_the_actor_loss(tmp_path):
    algo = tiny(tmp_path, bc_iters=100, train_batch_size=64).build()
    learner = algo.learner_group.local_learner
    algo.stop()
    batch = fixed_batch(64, 0.8)
    obs, actions = torch.from_numpy(batch.obs), torch.from_numpy(batch.actions)
    m, alpha = learner.module, torch.tensor(0.3)
    pi_inputs = m.pi(obs)
    for steps, behaviour_cloning in ((99, True), (100, False)):
        learner.gradient_steps = steps
        torch.manual_seed(1)
        loss, logp = learner.actor_loss(pi_inputs, obs, actions, alpha)
        torch.manual_seed(1)
        dist = SquashedGaussian(pi_inputs)
        new_actions, expected_logp = dist.rsample_with_logp()
        if behaviour_cloning:
            expected = (alpha * expected_logp - dist.log_prob(actions)).mean()
        else:
            expected = (
                alpha * expected_logp - torch.minimum(m.q1(obs, new_actions), m.q2(obs, new_actions))
            ).mean()
        torch.testing.assert_close(logp, expected_logp)
        torch.testing.assert_close(loss, expected)

    # Cloning moves the greedy action towards the recorded one (the entropy bonus holds it below
    # 0.8: measured 0.63); SAC's loss on the untrained critics leaves it near 0.
    greedy = {}
    for bc_iters in (1000, 0):
        config = tiny(tmp_path, bc_iters=bc_iters, train_batch_size=64)
        algo = config.training(optimization_config={"actor_learning_rate": 3e-3}).build()
        learner = algo.learner_group.local_learner
        algo.stop()
        for _ in range(100):
            learner.update_from_batch(batch, timestep=0)
        greedy[bc_iters] = SquashedGaussian(learner.module.pi(obs)).deterministic_sample().mean().item()
        assert learner.gradient_steps == 100 and learner.get_extra_state()["gradient_steps"] == 100
    assert greedy[1000] > 0.5 and abs(greedy[0]) < 0.3, greedy


def test_lagrangian_alpha_prime_learns_and_round_trips(tmp_path):
    # The penalty starts far above a threshold of -50: alpha_prime grows; far below 1000: it shrinks.
    for threshold, grows in ((-50.0, True), (1000.0, False)):
        algo = tiny(tmp_path, lagrangian=True, lagrangian_thresh=threshold).build()
        try:
            algo.train()
            result = algo.train()
            assert (result["alpha_prime_value"] > 1.0) is grows, result["alpha_prime_value"]
            assert np.isfinite(result["cql_loss"])
            path = algo.save(str(tmp_path / f"ckpt{threshold}"))
            learner = algo.learner_group.local_learner
            log_alpha_prime = learner.module.log_alpha_prime.item()
            steps = learner.optimizers["alpha_prime"].step_count
            gradient_steps = learner.gradient_steps
        finally:
            algo.stop()
        assert not list(Path(path).rglob("*.pkl")) and not list(Path(path).rglob("*.pickle"))
        restored = Algorithm.from_checkpoint(path)
        try:
            assert isinstance(restored, CQL)
            learner = restored.learner_group.local_learner
            assert learner.module.log_alpha_prime.item() == pytest.approx(log_alpha_prime)
            assert learner.optimizers["alpha_prime"].step_count == steps > 0
            assert learner.gradient_steps == gradient_steps > 0
            assert "alpha_prime_value" in restored.train()
        finally:
            restored.stop()


def test_without_offline_input_it_is_sac_with_the_penalty_and_warns_nothing(tmp_path, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING):
            algo = tiny(tmp_path).build()  # input_="sampler"
            try:
                algo.train()
                result = algo.train()
            finally:
                algo.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "rltrainer" in r.name]
    assert np.isfinite(result["cql_loss"]) and np.isfinite(result["critic_loss"])
    assert "alpha_prime_value" not in result  # reported with lagrangian=True only
    assert not hasattr(algo.learner_group.local_learner.module, "log_alpha_prime")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("twin_q", [True, False])
def test_updates_on_a_gpu(tmp_path, twin_q):
    """Every tensor the losses make lives on the learner's device (a CPU tensor among CUDA
    ones fails the step); alpha_prime and its Adam state round-trip there too."""
    from gymnasium import spaces

    from rltrainer.algorithms.cql.cql_learner import CQLLearner
    from rltrainer.core.learner import make_learner

    config = tiny(tmp_path, lagrangian=True, bc_iters=2, twin_q=twin_q, deterministic_backup=False)
    obs_space, action_space = spaces.Box(-8, 8, (3,), np.float32), spaces.Box(-2, 2, (1,), np.float32)
    learner = make_learner(CQLLearner, obs_space, action_space, config, "cuda")
    batch = fixed_batch(16, 0.5)._replace(terminateds=np.zeros(16, np.float32))
    for step in range(4):  # two behaviour-cloning steps, then SAC's actor loss
        stats = learner.update_from_batch(batch, timestep=step)
    assert all(np.isfinite(v) for v in stats.values()) and learner.last_td_errors.shape == (16,)
    assert {p.device.type for p in learner.module.parameters()} == {"cuda"}
    fresh = make_learner(CQLLearner, obs_space, action_space, config, "cuda")
    fresh.module.load_state_dict(learner.module.state_dict())
    fresh.set_optimizer_state(learner.get_optimizer_state())
    fresh.set_extra_state(learner.get_extra_state())
    assert fresh.module.log_alpha_prime.item() == learner.module.log_alpha_prime.item()
    fresh.update_from_batch(batch, timestep=4)
    assert fresh.optimizers["alpha_prime"].step_count == 5 and fresh.gradient_steps == 5


def test_discrete_actions_are_refused(tmp_path):
    with pytest.raises(
        ConfigError, match=r"CQL here needs a Box action space, got Discrete\(2\).*DQN, BC or MARWIL"
    ):
        tiny(tmp_path).environment("CartPole-v1").build()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_actions": 0}, "invalid value for 'num_actions'"),
        ({"temperature": 0.0}, "invalid value for 'temperature'"),
        ({"min_q_weight": -1.0}, "invalid value for 'min_q_weight'"),
        ({"bc_iters": -1}, "invalid value for 'bc_iters'"),
        ({"bc_iter": 10}, "training(): unknown key 'bc_iter'"),
    ],
)
def test_bad_settings_name_the_key(kwargs, message):
    with pytest.raises(ConfigError) as err:
        CQLConfig().environment("Pendulum-v1").training(**kwargs).validate()
    assert message in str(err.value)


# --- learning from a recorded SAC run ------------------------------------------------------------
SAC_STEPS = 4_000


@pytest.fixture(scope="module")
def sac_replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 4,000 steps of tuned_examples/sac_pendulum.yaml (seed 0), every sampled step
    recorded as it trained (RLlib's way of making CQL data; ~20 s on 2 cores). The SAC policy
    is far from solving Pendulum by then (smoothed return about -1000)."""
    tmp = tmp_path_factory.mktemp("sac")
    spec = yaml.safe_load((ROOT / "tuned_examples" / "sac_pendulum.yaml").read_text())["pendulum-sac"]
    # (Without the example's greedy evaluations: they decide when it stops, not what it records.)
    settings = {**spec["config"], "evaluation_interval": None}
    settings |= {"env": "Pendulum-v1", "seed": 0, "output": str(tmp / "data")}
    algo = SACConfig().update_from_dict(settings).reporting(storage_path=str(tmp)).build()
    while algo.train()["timesteps_total"] < SAC_STEPS:
        pass
    algo.stop()
    return tmp / "data"


#: A last guard, as every deadline (testing.md, "Slow machines"): ~80 s on 2 idle cores with its
#: SAC fixture, over 300 s with both cores busy elsewhere (a fixed amount of computing).
@pytest.mark.timeout(900)
@pytest.mark.e2e_only("the penalty, Bellman, BC and Lagrangian tests against hand computations")
def test_cql_learns_pendulum_from_recorded_sac_data(tmp_path, sac_replay):
    """The tuned example's settings on the SAC replay above: the greedy evaluation reaches -300
    after 14 iterations (3,500 gradient steps; about 20 s on 2 cores), within a budget of 24."""
    spec = yaml.safe_load((ROOT / "tuned_examples" / "cql_pendulum.yaml").read_text())["pendulum-cql"]
    config = CQLConfig().update_from_dict({**spec["config"], "env": "Pendulum-v1", "input": str(sac_replay)})
    # One torch thread, not the example's two: on the suite's busy cores the second thread spins
    # waiting for its share, many times the update's own CPU (measured 20x); the algorithm is the same.
    config.resources(num_cpus_for_main_process=1)
    started = time.perf_counter()
    algo = config.reporting(storage_path=str(tmp_path)).build()
    try:
        best = -math.inf
        for _ in range(24):
            result = algo.train()
            best = max(best, result["evaluation"]["episode_return_mean"])
            if best >= -300:
                break
        assert best >= -300, f"best evaluation {best:.1f} after {result['training_iteration']} iterations"
        assert np.isnan(result["episode_return_mean"])  # no env episodes: it only read recorded rows
        assert algo.learner_group.local_learner.gradient_steps == 250 * result["training_iteration"]
    finally:
        algo.stop()
    seconds = time.perf_counter() - started
    print(f"CQL: {best:.1f} after {result['training_iteration']} iterations, {seconds:.1f} s")
