"""The exploration API's base class (``Exploration``) and the strategies that act on the action
distribution alone: ``StochasticSampling``, ``Random``, ``EpsilonGreedy``, ``SoftQ``,
``GaussianNoise``, ``OrnsteinUhlenbeckNoise`` and their per-worker forms. Import them from
``rltrainer.core.exploration``, which also holds the strategies with models of their own and
picks a strategy from an ``exploration_config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from rltrainer.env.spaces import space_parts

if TYPE_CHECKING:  # torch: the operator checks exploration_config without it
    from rltrainer.core.distributions import ActionDistribution


def linear_schedule(initial: float, final: float, timesteps: int, timestep: int, start: int = 0) -> float:
    """``initial`` until ``start``, then linearly to ``final`` over ``timesteps``, then ``final``."""
    if timesteps <= 0:
        return final if timestep >= start else initial
    fraction = min(max((timestep - start) / timesteps, 0.0), 1.0)
    return initial + fraction * (final - initial)


class Exploration:
    """Base class: acts greedily when ``explore`` is False, samples the distribution otherwise.

    ``action_space`` is the policy's action space: for Box actions with
    ``normalize_actions`` that is [-1, 1] per dimension (the env runner rescales).
    Subclasses take their settings as keyword arguments (``exploration_config``).
    """

    def __init__(self, action_space: spaces.Space, *, rng: np.random.Generator | None = None) -> None:
        self.action_space = action_space
        self.rng = rng if rng is not None else np.random.default_rng()

    def get_exploration_action(
        self,
        action_distribution: ActionDistribution,
        timestep: int,  # noqa: ARG002 - the schedules of subclasses use it
        explore: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions [B, ...], logp [B])`` for a batch of distributions (``explore`` defaults to
        True, as RLlib's)."""
        if explore:
            return action_distribution.sample()
        return action_distribution.deterministic_sample()

    def on_episodes_done(self, dones: np.ndarray) -> None:  # noqa: B027 - optional hook
        """Called by env runners with the ``[N]`` mask of envs whose episode just ended."""

    def set_worker(self, worker_index: int, num_workers: int) -> None:  # noqa: B027 - optional hook
        """Called by each env runner once built: its index (0: the driver's) among
        ``num_workers`` remote ones (RLlib's ``worker_info``; the per-worker variants use it)."""

    #: Whether the policy's network outputs go through ``forward`` (explorations that act with
    #: other weights than the policy's, e.g. ``ParameterNoise``); off for every other one.
    perturbs_parameters = False

    def attach(self, policy: Any) -> None:  # noqa: B027 - optional hook
        """Called by the policy that owns this exploration, once its network exists."""

    def forward(self, network: Any, flat_obs: np.ndarray, explore: bool, timestep: int) -> np.ndarray:  # noqa: ARG002
        """The distribution's inputs for ``flat_obs`` (``perturbs_parameters`` explorations only)."""
        return network(flat_obs)

    def random_actions(self, batch_size: int, valid: np.ndarray | None = None) -> np.ndarray:
        """Uniform actions from the policy's action space, as a ``[B, ...]`` batch; with an
        action mask ``valid`` (``[B, n]``), uniform among each row's allowed actions."""
        return uniform_actions(self.action_space, batch_size, self.rng, valid)


def uniform_actions(
    space: spaces.Space, batch_size: int, rng: np.random.Generator, valid: np.ndarray | None = None
) -> np.ndarray:
    """``Exploration.random_actions`` for ``space``, in the distribution's terms: discrete
    indices from 0 (the env's ``start`` is added with the action), Box values within the
    bounds (+-1 where a bound is infinite); a Dict/Tuple space's rows of its parts' columns."""
    if isinstance(space, spaces.Discrete):
        if valid is not None:
            scores = np.where(valid, rng.random(valid.shape), -1.0)
            return scores.argmax(axis=1)
        return rng.integers(0, space.n, size=batch_size)
    if isinstance(space, spaces.MultiDiscrete):  # in the distribution's terms: from 0, one column each
        nvec = np.asarray(space.nvec).reshape(-1)
        return rng.integers(0, nvec, size=(batch_size, len(nvec)))
    if isinstance(space, spaces.MultiBinary):
        return rng.integers(0, 2, size=(batch_size, int(np.prod(space.shape))))
    if isinstance(space, spaces.Box):
        low = np.where(np.isfinite(space.low), space.low, -1.0)
        high = np.where(np.isfinite(space.high), space.high, 1.0)
        shape = (batch_size, *space.shape)
        return rng.uniform(low, high, size=shape).astype(np.float32)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        parts = [
            uniform_actions(part, batch_size, rng).reshape(batch_size, -1) for _, part in space_parts(space)
        ]
        return np.concatenate(parts, axis=1).astype(np.float32)
    raise ValueError(f"random actions for {space} are not supported")


class StochasticSampling(Exploration):
    """Sample the distribution; uniformly random actions for the first ``random_timesteps``."""

    def __init__(self, action_space: spaces.Space, *, random_timesteps: int = 0, **kwargs: Any) -> None:
        super().__init__(action_space, **kwargs)
        self.random_timesteps = int(random_timesteps)

    def get_exploration_action(self, action_distribution, timestep, explore=True):
        if explore and timestep < self.random_timesteps:
            actions = self.random_actions(len(action_distribution.inputs), action_distribution.valid)
            return actions, np.zeros(len(actions), dtype=np.float32)
        return super().get_exploration_action(action_distribution, timestep, explore)


class Random(Exploration):
    """Uniformly random actions when exploring (the greedy action otherwise)."""

    def get_exploration_action(self, action_distribution, timestep, explore=True):  # noqa: ARG002
        if not explore:
            return action_distribution.deterministic_sample()
        actions = self.random_actions(len(action_distribution.inputs), action_distribution.valid)
        return actions, np.zeros(len(actions), dtype=np.float32)


class EpsilonGreedy(Exploration):
    """With probability epsilon a random action, else the greedy one (discrete actions).

    Epsilon stays at ``initial_epsilon`` for ``warmup_timesteps``, then decays linearly to
    ``final_epsilon`` over ``epsilon_timesteps`` (RLlib's defaults).
    """

    def __init__(
        self,
        action_space: spaces.Space,
        *,
        initial_epsilon: float = 1.0,
        final_epsilon: float = 0.05,
        warmup_timesteps: int = 0,
        epsilon_timesteps: int = 100_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(action_space, **kwargs)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"EpsilonGreedy needs a Discrete action space, got {action_space}")
        for name, value in (("initial_epsilon", initial_epsilon), ("final_epsilon", final_epsilon)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self.initial_epsilon, self.final_epsilon = float(initial_epsilon), float(final_epsilon)
        self.warmup_timesteps, self.epsilon_timesteps = int(warmup_timesteps), int(epsilon_timesteps)

    def epsilon(self, timestep: int) -> float:
        return linear_schedule(
            self.initial_epsilon, self.final_epsilon, self.epsilon_timesteps, timestep, self.warmup_timesteps
        )

    def get_exploration_action(self, action_distribution, timestep, explore=True):
        greedy, _ = action_distribution.deterministic_sample()
        logp = np.zeros(len(greedy), dtype=np.float32)
        if not explore:
            return greedy, logp
        random = self.rng.random(len(greedy)) < self.epsilon(timestep)
        actions = np.where(random, self.random_actions(len(greedy), action_distribution.valid), greedy)
        return actions, logp


class SoftQ(Exploration):
    """Boltzmann exploration: sample from softmax(inputs / temperature) (discrete actions)."""

    def __init__(self, action_space: spaces.Space, *, temperature: float = 1.0, **kwargs: Any) -> None:
        super().__init__(action_space, **kwargs)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"SoftQ needs a Discrete action space, got {action_space}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def get_exploration_action(self, action_distribution, timestep, explore=True):  # noqa: ARG002
        if not explore:
            return action_distribution.deterministic_sample()
        scaled = action_distribution.with_inputs(action_distribution.inputs / self.temperature)
        return scaled.sample()


class GaussianNoise(Exploration):
    """Deterministic action plus ``N(0, stddev * scale)`` noise (continuous actions).

    Uniformly random actions for ``random_timesteps``; the scale anneals from
    ``initial_scale`` to ``final_scale`` over ``scale_timesteps`` after them. Actions are
    clipped to the action space.
    """

    def __init__(
        self,
        action_space: spaces.Space,
        *,
        random_timesteps: int = 1000,
        stddev: float = 0.1,
        initial_scale: float = 1.0,
        final_scale: float = 0.02,
        scale_timesteps: int = 10_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(action_space, **kwargs)
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"{type(self).__name__} needs a Box action space, got {action_space}")
        if stddev < 0:
            raise ValueError(f"stddev must be >= 0, got {stddev}")
        self.random_timesteps, self.stddev = int(random_timesteps), float(stddev)
        self.initial_scale, self.final_scale = float(initial_scale), float(final_scale)
        self.scale_timesteps = int(scale_timesteps)

    def scale(self, timestep: int) -> float:
        return linear_schedule(
            self.initial_scale, self.final_scale, self.scale_timesteps, timestep, self.random_timesteps
        )

    def noise(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.stddev * self.rng.standard_normal(shape)

    def get_exploration_action(self, action_distribution, timestep, explore=True):
        actions, _ = action_distribution.deterministic_sample()
        logp = np.zeros(len(actions), dtype=np.float32)
        if not explore:
            return actions, logp
        if timestep < self.random_timesteps:
            return self.random_actions(len(actions)), logp
        noisy = actions + self.scale(timestep) * self.noise(actions.shape)
        # np.clip's values through two ufunc calls (a third of np.clip's wrappers' cost per env step)
        np.maximum(noisy, self.action_space.low, out=noisy)
        return np.minimum(noisy, self.action_space.high, out=noisy).astype(np.float32), logp


class OrnsteinUhlenbeckNoise(GaussianNoise):
    """Temporally correlated noise (Lillicrap et al. 2016, DDPG), one process per env.

    ``x += theta * -x + sigma * N(0, 1)``, added as ``scale * ou_base_scale * x``; the process
    of an env restarts at 0 when its episode ends.
    """

    def __init__(
        self,
        action_space: spaces.Space,
        *,
        ou_theta: float = 0.15,
        ou_sigma: float = 0.2,
        ou_base_scale: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(action_space, **kwargs)
        self.ou_theta, self.ou_sigma = float(ou_theta), float(ou_sigma)
        self.ou_base_scale = float(ou_base_scale)
        self.state = np.zeros((0, *action_space.shape), dtype=np.float64)

    def noise(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.state.shape != shape:  # a new batch size (e.g. compute_single_action): start over
            self.state = np.zeros(shape)
        self.state += self.ou_theta * -self.state + self.ou_sigma * self.rng.standard_normal(shape)
        return self.ou_base_scale * self.state

    def on_episodes_done(self, dones: np.ndarray) -> None:
        if self.state.shape[0] == len(dones):
            self.state[dones] = 0.0


def per_worker_constant(worker_index: int, num_workers: int) -> float:
    """Ape-X's per-worker constant (Horgan et al. 2018, p. 5): ``0.4 ** (1 + 7 i / (N - 1))``
    for remote worker ``i + 1`` of ``N``, so workers range from much to little exploration; 0 for
    the driver's runner (it evaluates)."""
    if worker_index == 0:
        return 0.0
    return 0.4 ** (1 + (worker_index - 1) / max(num_workers - 1, 1) * 7)


class PerWorkerEpsilonGreedy(EpsilonGreedy):
    """Ape-X's exploration: with remote env runners each explores with its own constant epsilon
    (``per_worker_constant``); without them, ``EpsilonGreedy``'s schedule."""

    def set_worker(self, worker_index: int, num_workers: int) -> None:
        if num_workers > 0:
            epsilon = per_worker_constant(worker_index, num_workers)
            self.initial_epsilon = self.final_epsilon = epsilon


class PerWorkerGaussianNoise(GaussianNoise):
    """``GaussianNoise`` with a constant scale per remote env runner (``per_worker_constant``);
    without remote runners, the usual schedule."""

    def set_worker(self, worker_index: int, num_workers: int) -> None:
        if num_workers > 0:
            self.initial_scale = self.final_scale = per_worker_constant(worker_index, num_workers)


class PerWorkerOrnsteinUhlenbeckNoise(OrnsteinUhlenbeckNoise):
    """``OrnsteinUhlenbeckNoise`` with a constant scale per remote env runner
    (``per_worker_constant``); without remote runners, the usual schedule."""

    set_worker = PerWorkerGaussianNoise.set_worker
