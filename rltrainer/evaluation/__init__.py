"""Rolling out a trained policy from a checkpoint: episode returns, optionally videos.

What ``rltrainer evaluate`` runs (RLlib's ``rllib evaluate``): one env, one action per step
from ``Algorithm.compute_single_action``, the raw env rewards summed per episode.
``rltrainer.evaluation.rollout_worker`` holds RLlib's ``get_global_worker()`` path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rltrainer.algorithms import Algorithm
from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import make_env
from rltrainer.errors import EnvError

DEFAULT_EPISODES = 10


@dataclasses.dataclass
class Episode:
    """One evaluated episode."""

    index: int
    """0-based; videos are named ``episode_<index:03d>.mp4``."""
    episode_return: float
    """Sum of the env's rewards (unclipped)."""
    length: int
    """Env steps taken."""
    finished: bool
    """False for the last episode of a ``steps`` budget that ran out before it ended."""
    video_path: Path | None = None
    policy_returns: dict[str, float] | None = None
    """Multi-agent: each policy's agents' returns, summed per policy."""


@dataclasses.dataclass
class EvaluationResult:
    episodes: list[Episode]

    @property
    def finished(self) -> list[Episode]:
        return [e for e in self.episodes if e.finished]

    @property
    def mean_return(self) -> float:
        """Mean return of the finished episodes (NaN when none finished)."""
        returns = [e.episode_return for e in self.finished]
        return sum(returns) / len(returns) if returns else math.nan


def load_checkpoint(checkpoint: str, env: Any = None, config_overrides: dict | None = None) -> Algorithm:
    """The algorithm saved in ``checkpoint``, set up for inference in this process.

    ``env`` replaces the checkpoint's env (its spaces must match, else ``CheckpointError``).
    No Ray actors are started (neither env runners, evaluation env runners nor learners):
    evaluation steps its own single env in this process. Training-time evaluation settings
    are turned off (a ``custom_evaluation_function`` saved by name need not be importable).
    """
    overrides = {
        **(config_overrides or {}),
        "num_env_runners": 0,
        "num_envs_per_env_runner": 1,
        "num_learners": 0,
        "evaluation_num_env_runners": 0,
        "evaluation_parallel_to_training": False,
        "evaluation_duration": DEFAULT_EPISODES,
        "custom_evaluation_function": None,
    }
    if env is not None:
        overrides["env"] = env
    return Algorithm.from_checkpoint(checkpoint, config_overrides=overrides)


def default_explore(algo: Algorithm) -> bool:
    """The checkpoint's ``evaluation_config["explore"]`` if set, else False (greedy actions)."""
    return bool((algo.config.evaluation_config or {}).get("explore", False))


def evaluate(
    algo: Algorithm,
    *,
    episodes: int | None = None,
    steps: int | None = None,
    explore: bool | None = None,
    video_dir: str | Path | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> EvaluationResult:
    """Run ``episodes`` episodes (default 10), or until ``steps`` env steps, in one new env.

    ``video_dir``: write each episode to ``<video_dir>/episode_000.mp4``, ... (the env must
    support ``render_mode="rgb_array"``). ``on_episode`` is called as each episode ends.
    """
    if episodes is not None and steps is not None:
        raise ValueError("pass episodes or steps, not both")
    if episodes is None and steps is None:
        episodes = DEFAULT_EPISODES
    explore = default_explore(algo) if explore is None else explore
    config = algo.config
    if algo._multi_agent:
        if video_dir is not None:
            raise EnvError("videos record single-agent envs: run a multi-agent checkpoint without --video")
        return _evaluate_multi_agent(algo, episodes, steps, explore, on_episode)
    env = make_env(config.env, EnvContext(config.env_config), render_mode="rgb_array" if video_dir else None)
    try:
        if video_dir is not None:
            _check_renders(env, config.env_name)
            Path(video_dir).mkdir(parents=True, exist_ok=True)
        done: list[Episode] = []
        steps_left = math.inf if steps is None else steps
        while steps_left > 0 and (episodes is None or len(done) < episodes):
            index = len(done)
            video = Path(video_dir) / f"episode_{index:03d}.mp4" if video_dir is not None else None
            with _video_writer(video, env) as record:
                seed = config.seed if index == 0 else None
                episode = _run_episode(algo, env, explore, steps_left, seed, record)
            episode = dataclasses.replace(episode, index=index, video_path=video)
            steps_left -= episode.length
            done.append(episode)
            if on_episode is not None:
                on_episode(episode)
        return EvaluationResult(done)
    finally:
        env.close()


def _run_episode(
    algo: Algorithm,
    env: gym.Env,
    explore: bool,
    max_steps: float,
    seed: int | None,
    record: Callable[[], None],
) -> Episode:
    obs, _ = env.reset(seed=seed)
    record()
    total, length, ended = 0.0, 0, False
    policy = algo.get_policy()
    state = policy.get_initial_state()  # an LSTM's state is carried through the episode
    prev_action = prev_reward = None
    runner = algo.env_runner_group.local_worker()  # its reward clipping (what the sampler feeds)
    while not ended and length < max_steps:
        if not policy.recurrent:
            action = algo.compute_single_action(obs, explore=explore)
        else:
            action, state, _ = algo.compute_single_action(
                obs, state, prev_action=prev_action, prev_reward=prev_reward, explore=explore
            )
        obs, reward, terminated, truncated, _ = env.step(action)
        if policy.recurrent:  # what the sampler feeds: the action taken, the (clipped) reward
            prev_action, prev_reward = action, float(runner.clip_rewards(np.float32([reward]))[0])
        record()
        total += float(reward)
        length += 1
        ended = terminated or truncated
    return Episode(index=0, episode_return=total, length=length, finished=ended)


def _evaluate_multi_agent(
    algo: Algorithm,
    episodes: int | None,
    steps: int | None,
    explore: bool,
    on_episode: Callable[[Episode], None] | None,
) -> EvaluationResult:
    """A multi-agent checkpoint's episodes, run by its env runner (one env, every policy acting)."""
    runner = algo.env_runner_group.local_worker()
    ended, _ = runner.sample_episodes(num_episodes=episodes, num_timesteps=steps, explore=explore)
    done = []
    for index, stats in enumerate(ended):
        returns: dict[str, float] = {}
        for pid, value in stats.policy_returns or ():
            returns[pid] = returns.get(pid, 0.0) + value
        episode = Episode(index, stats.episode_return, stats.episode_len, True, None, returns)
        done.append(episode)
        if on_episode is not None:
            on_episode(episode)
    return EvaluationResult(done)  # (with a steps budget: the episodes it finished)


def _check_renders(env: gym.Env, name: str) -> None:
    modes = env.metadata.get("render_modes", [])
    if env.render_mode != "rgb_array" or "rgb_array" not in modes:
        raise EnvError(
            f"env {name!r} cannot record video: it does not render rgb_array frames "
            f"(render modes: {', '.join(modes) or 'none'})"
        )


@contextmanager
def _video_writer(path: Path | None, env: gym.Env) -> Iterator[Callable[[], None]]:
    """A ``record()`` that appends ``env.render()`` to an mp4 at ``path`` (a no-op without one).

    Frames are streamed to ffmpeg as they come, so long episodes do not pile up in memory.
    """
    if path is None:
        yield lambda: None
        return
    from rltrainer.env.video import mp4_writer

    with mp4_writer(path, env) as writer:

        def record() -> None:
            frame = env.render()
            if frame is None:
                raise EnvError(f"env {env!r} returned no frame from render() with render_mode='rgb_array'")
            writer.append_data(frame)

        yield record


__all__ = [
    "DEFAULT_EPISODES",
    "Episode",
    "EvaluationResult",
    "default_explore",
    "evaluate",
    "load_checkpoint",
]
