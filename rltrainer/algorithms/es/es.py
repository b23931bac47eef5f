"""ES and ARS: derivative-free policy search (configs in ``es_config``).

Every iteration the driver sends the current weights theta to the env runners; each runner
draws perturbations eps from a Gaussian noise table shared through Ray's object store (only
the table's offset travels back), runs one episode with theta + sigma eps and one with
theta - sigma eps (antithetic pairs), acting deterministically, and now and then an evaluation
episode with theta itself. Perturbed episodes update the observation filter (``MeanStdFilter``,
RLlib's default for both: ARS's observation normalization); the driver merges the runners'
statistics after each iteration and sends the merged filter back. The driver turns the
returns into a step on theta:

- ES (Salimans et al. 2017): returns to centered ranks, g = sum_i (r+_i - r-_i) eps_i / (2n),
  Adam on -g + l2_coeff * theta.
- ARS (Mania et al. 2018; V2-t with the filter): the ``rollouts_used`` best directions, g = sum (r+ - r-) eps
  / (b * std of their returns), a plain step of ``sgd_stepsize``.

Weights are flattened by name (``flatten``) in the same order in the driver and the runners,
so a noise offset means the same parameters everywhere. Reported episode metrics are the
evaluation episodes' (unperturbed weights); every iteration has at least one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.es.es_config import ARSConfig, ESConfig
from rltrainer.core.exploration import GaussianNoise
from rltrainer.core.learner import Learner
from rltrainer.env.env_runner import EpisodeStats
from rltrainer.errors import ConfigError, WorkerError

NOISE_SEED = 123  # RLlib's shared noise table seed


def noise_table(size: int, seed: int = NOISE_SEED) -> np.ndarray:
    """The shared table of standard normal float32 noise."""
    return np.random.default_rng(seed).standard_normal(size, dtype=np.float32)


def flatten(weights: dict[str, Any]) -> np.ndarray:
    """The floating-point arrays of ``weights``, by sorted name, as one float32 vector."""
    return np.concatenate(
        [np.asarray(weights[k], dtype=np.float32).ravel() for k in sorted(weights) if _floating(weights[k])]
    )


def unflatten(vector: np.ndarray, template: dict[str, Any]) -> dict[str, np.ndarray]:
    """``flatten``'s inverse, shaped like ``template`` (its non-float entries left out)."""
    out, offset = {}, 0
    for name in sorted(template):
        if not _floating(template[name]):
            continue
        shape = np.shape(template[name])
        size = int(np.prod(shape))
        out[name] = vector[offset : offset + size].reshape(shape)
        offset += size
    return out


def _floating(array: Any) -> bool:
    return np.issubdtype(np.asarray(array).dtype, np.floating)


def perturbed_rollouts(
    runner: Any,
    noise: np.ndarray,
    theta: np.ndarray,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Run in an env runner: antithetic episode pairs until ``settings["directions"]`` pairs
    and ``settings["min_steps"]`` env steps, plus evaluation episodes (``eval_prob`` before each
    pair; at least one when ``settings["must_evaluate"]``). Returns noise offsets, returns and
    lengths ``[n, 2]`` and the evaluation episodes."""
    rng = np.random.default_rng(settings["seed"])
    template = runner.get_weights()
    sigma, dim = settings["noise_stdev"], theta.size
    box = isinstance(runner.policy.action_space, spaces.Box) and settings["action_noise_std"] > 0
    saved = runner.policy.exploration
    if box:  # noise on the actions of perturbed rollouts (ES's action_noise_std)
        runner.policy.exploration = GaussianNoise(
            runner.policy.policy_action_space(),
            stddev=settings["action_noise_std"],
            initial_scale=1.0,
            final_scale=1.0,
            random_timesteps=0,
            rng=rng,
        )

    lean = lean_episodes(runner)

    def episode(weights: np.ndarray, explore: bool | None) -> EpisodeStats:
        """One episode with ``weights``; ``explore=None``: an evaluation (no noise, no filter update)."""
        runner.set_weights(unflatten(weights, template))
        # Perturbed episodes feed the observation filter (MeanStdFilter), evaluations do not.
        update = explore is not None
        if lean is not None:
            return lean(bool(explore), update)
        episodes, _ = runner.sample_episodes(num_episodes=1, explore=bool(explore), update_filter=update)
        return episodes[0]

    offsets, returns, lengths, evaluations = [], [], [], []
    steps = 0
    try:
        while len(offsets) < settings["directions"] or steps < settings["min_steps"]:
            if rng.random() < settings["eval_prob"] or (settings["must_evaluate"] and not evaluations):
                evaluations.append(episode(theta, explore=None))
            offset = int(rng.integers(0, noise.size - dim + 1))
            eps = noise[offset : offset + dim]
            pair = [episode(theta + sigma * eps, box), episode(theta - sigma * eps, box)]
            offsets.append(offset)
            returns.append([e.episode_return for e in pair])
            lengths.append([e.episode_len for e in pair])
            steps += sum(e.episode_len for e in pair)
    finally:
        runner.policy.exploration = saved
        runner.set_weights(unflatten(theta, template))
    return {
        "filter_delta": runner.filter.pop_delta(),
        "offsets": np.asarray(offsets, dtype=np.int64),
        "returns": np.asarray(returns, dtype=np.float64).reshape(-1, 2),
        "lengths": np.asarray(lengths, dtype=np.int64).reshape(-1, 2),
        "evaluations": evaluations,
    }


def lean_episodes(runner: Any) -> Any:
    """``run(explore, update_filter) -> EpisodeStats``: one episode on a plain env of the runner's
    own, as RLlib's ES rolls out, or None where the runner's sampling loop is needed (episode
    callbacks or trajectory output observe the steps, recurrent state, envs restarted on crash).

    ES runs one episode per perturbation, so the runner's vector env holds one env: its batching
    costs more than the step itself (CartPole: ~170 us a step through the runner's loop, ~90 us
    here; each episode's weights differ, so episodes cannot share a batch either)."""
    config = runner.config
    if (
        runner._tracker is not None
        or runner._recurrent is not None
        or runner.output_writer is not None
        or config.restart_failed_sub_environments
        or config.env is None
    ):
        return None
    import itertools
    import weakref

    from gymnasium.wrappers import TimeLimit

    from rltrainer.env.env_runner import EnvStepError
    from rltrainer.env.registry import make_env

    env = make_env(config.env, runner._ctx)
    if config.horizon is not None:
        env = TimeLimit(env, max_episode_steps=config.horizon)
    weakref.finalize(runner, env.close)
    policy, guard, seeds = runner.policy, runner._guard, itertools.count()
    preprocess, filtered = policy.preprocessor.transform_one, not runner._unfiltered
    base_seed = None if config.seed is None else config.seed + 1000 * runner.worker_index

    def call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            raise EnvStepError.of(config.env, what, err, runner.observation_space) from err

    def run(explore: bool, update_filter: bool) -> EpisodeStats:
        seed = base_seed if next(seeds) == 0 else None  # seeded once, as the runner's envs
        obs, _ = call("reset()", env.reset, seed=seed)
        total, length, done = 0.0, 0, False
        while not done:
            flat = guard.check("observation", preprocess(obs), policy.global_timestep)
            if filtered:
                flat = runner.filter(flat, update=update_filter)
            action = policy.compute(flat, explore)["env_actions"][0]
            obs, reward, terminated, truncated, _ = call("step()", env.step, action)
            total += float(guard.check("reward", np.asarray([reward]), policy.global_timestep)[0])
            length += 1
            done = terminated or truncated
        if update_filter:  # as the runner's loop: training episodes advance the schedules
            policy.global_timestep += length
        return EpisodeStats(total, length)

    return run


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank among all, scaled to [-0.5, 0.5] (ES's fitness shaping)."""
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[values.ravel().argsort(kind="stable")] = np.arange(values.size)
    return (ranks / max(values.size - 1, 1) - 0.5).reshape(values.shape)


def weighted_noise(noise: np.ndarray, offsets: np.ndarray, weights: np.ndarray, dim: int) -> np.ndarray:
    """sum_i weights_i * noise[offsets_i : offsets_i + dim]."""
    total = np.zeros(dim, dtype=np.float64)
    for offset, weight in zip(offsets, weights, strict=True):
        total += weight * noise[offset : offset + dim]
    return total


class DerivativeFreeLearner(Learner):
    """Holds the policy's network and a numpy optimizer over its flattened weights (no loss)."""

    COMPILES_FORWARD = False

    STAT_KEYS = ESConfig.STAT_KEYS

    def build_optimizers(self) -> None:
        self.step_count = 0
        self.moments = np.zeros((2, self.theta.size))  # Adam's (ES); unused by ARS's plain step

    @property
    def theta(self) -> np.ndarray:
        """The network's weights, flattened (``flatten``'s order), as float64."""
        return flatten(self.get_weights()).astype(np.float64)

    def apply_step(self, gradient: np.ndarray) -> float:
        """Move theta along ``gradient`` (ascent), load it into the network; the update ratio."""
        cfg = self.config
        theta = self.theta
        self.step_count += 1
        if isinstance(cfg, ARSConfig):
            step = cfg.sgd_stepsize * gradient
        else:  # Adam on the loss -g + l2 * theta (RLlib's ES optimizer, epsilon 1e-8)
            loss_grad = -gradient + cfg.l2_coeff * theta
            m, v = self.moments
            m[:] = 0.9 * m + 0.1 * loss_grad
            v[:] = 0.999 * v + 0.001 * loss_grad**2
            lr = cfg.stepsize * np.sqrt(1 - 0.999**self.step_count) / (1 - 0.9**self.step_count)
            step = -lr * m / (np.sqrt(v) + 1e-8)
        theta = theta + step
        self.set_weights(unflatten(theta.astype(np.float32), self.get_weights()))
        return float(np.linalg.norm(step) / (np.linalg.norm(theta) + 1e-12))

    def get_optimizer_state(self) -> dict[str, torch.Tensor]:
        return {
            "step": torch.tensor(self.step_count, dtype=torch.int64),
            "moments": torch.from_numpy(self.moments.copy()),
        }

    def set_optimizer_state(self, tensors: dict[str, torch.Tensor]) -> None:
        moments = tensors["moments"].numpy()
        if moments.shape != self.moments.shape:
            raise ValueError(f"optimizer moments have shape {moments.shape}, expected {self.moments.shape}")
        self.moments, self.step_count = moments.copy(), int(tensors["step"])

    def setup_data_parallel(self, init_method: str, rank: int, world_size: int) -> None:
        raise NotImplementedError(f"{self.config.ALGORITHM} updates in the driver (num_learners=0)")


class ES(Algorithm):
    """Evolution strategies (Salimans et al. 2017), RLlib's ``ES``."""

    config_class = ESConfig
    learner_class = DerivativeFreeLearner

    def setup(self, config: Any) -> None:
        super().setup(config)
        parameters = self.learner_group.local_learner.theta.size
        if self.config.noise_size <= parameters:
            # Each perturbation is a slice of the table as long as the weights.
            raise ConfigError(
                f"noise_size={self.config.noise_size} is too small for this policy's {parameters} "
                f"weights: the noise table needs more entries than the policy has weights (RLlib's "
                f"default is 250000000)"
            )
        self.noise = noise_table(self.config.noise_size)
        self._noise_ref: Any = None
        self._evaluation_returns: list[float] = []

    def directions_per_call(self) -> tuple[int, int]:
        """``(antithetic pairs, env steps)`` each env runner collects per iteration at least."""
        cfg = self.config
        runners = max(1, len(self.env_runner_group.healthy_env_runner_ids()))
        return -(-cfg.episodes_per_batch // (2 * runners)), -(-cfg.train_batch_size // runners)

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        learner = self.learner_group.local_learner
        theta = learner.theta.astype(np.float32)
        directions, min_steps = self.directions_per_call()
        settings = {
            "directions": directions,
            "min_steps": min_steps,
            "noise_stdev": cfg.noise_stdev,
            "action_noise_std": getattr(cfg, "action_noise_std", 0.0),
            "eval_prob": cfg.eval_prob,
        }
        with self.timed("sample"):
            results = self._rollouts(theta, settings)
        offsets = np.concatenate([r["offsets"] for r in results])
        returns = np.concatenate([r["returns"] for r in results])
        lengths = np.concatenate([r["lengths"] for r in results])
        evaluations = [e for r in results for e in r["evaluations"]]
        steps = int(lengths.sum()) + sum(e.episode_len for e in evaluations)
        self.count_samples([], evaluations, steps=steps)
        with self.timed("learn"):
            gradient = self.gradient(offsets, returns, lengths, theta.size)
            update_ratio = learner.apply_step(gradient)
        self.env_runner_group.local_worker().set_weights(learner.get_weights())
        self.counters.num_env_steps_trained += int(lengths.sum())
        return {
            "weights_norm": float(np.linalg.norm(learner.theta)),
            "grad_norm": float(np.linalg.norm(gradient)),
            "update_ratio": update_ratio,
            "episodes_this_iter": float(returns.size),
            "perturbations": float(len(offsets)),
        }

    def _rollouts(self, theta: np.ndarray, settings: dict[str, Any]) -> list[dict[str, Any]]:
        """Every runner's perturbed episodes (the local runner's without remote ones)."""
        group = self.env_runner_group
        base_seed = (self.config.seed or 0) * 1_000_003 + self.counters.training_iteration * 1009
        if not group.num_remote_workers():
            local = {**settings, "seed": base_seed, "must_evaluate": True}
            return [perturbed_rollouts(group.local_worker(), self.noise, theta, local)]
        import ray

        if self._noise_ref is None:
            self._noise_ref = ray.put(self.noise)
        ids = group.live_remote_ids()
        args = {}
        for wid in ids:  # the first runner always evaluates once: every iteration reports a return
            own = {**settings, "seed": base_seed + wid, "must_evaluate": wid == ids[0]}
            args[wid] = (perturbed_rollouts, self._noise_ref, theta, own)
        results = group.call_remote(
            args, self.config.sample_timeout_s, "perturbed rollouts", "sample_timeout_s"
        )
        if not results:
            raise WorkerError("no env runner returned its perturbed rollouts")
        group.apply_filter_deltas([result["filter_delta"] for result in results.values()])
        return list(results.values())

    def gradient(
        self,
        offsets: np.ndarray,
        returns: np.ndarray,
        lengths: np.ndarray,  # noqa: ARG002 - ARS's offset uses them
        dim: int,
    ) -> np.ndarray:
        """ES's estimate: centered ranks, antithetic differences, averaged over all episodes."""
        ranked = centered_ranks(returns)
        return weighted_noise(self.noise, offsets, ranked[:, 0] - ranked[:, 1], dim) / returns.size


class ARS(ES):
    """Augmented random search (Mania et al. 2018), RLlib's ``ARS``."""

    config_class = ARSConfig

    def directions_per_call(self) -> tuple[int, int]:
        runners = max(1, len(self.env_runner_group.healthy_env_runner_ids()))
        return -(-self.config.num_rollouts // runners), 0

    def gradient(self, offsets: np.ndarray, returns: np.ndarray, lengths: np.ndarray, dim: int) -> np.ndarray:
        """ARS's estimate from the ``rollouts_used`` best directions, scaled by their returns' std."""
        returns = returns - self.config.offset * lengths
        used = np.argsort(returns.max(axis=1), kind="stable")[-self.config.rollouts_used :]
        best = returns[used]
        total = weighted_noise(self.noise, offsets[used], best[:, 0] - best[:, 1], dim)
        return total / (len(used) * (best.std() + 1e-8))


__all__ = ["ARS", "ARSConfig", "ES", "ESConfig"]
