"""Atari games (``ale-py``), preprocessed as RLlib's ``is_atari`` envs and DeepMind's papers do.

Every ALE id (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ...) runs on ALE's own batched env
(``ale_py.vector_env.AtariVectorEnv``: emulators stepped in C++ threads), which does the
DeepMind preprocessing itself: 4 frames skipped with max-pooling, 84x84 grayscale, the last 4
frames stacked, up to 30 no-ops and FIRE at reset. Observations are ``uint8`` ``(84, 84, 4)``
(height, width, frames: channels last, as the conv encoder reads them). Rewards are the game's
(set ``clip_rewards=True`` to learn from their signs, as the tuned examples do), so returns are
game scores. The id's own settings are kept (sticky actions for v5 and v0 ids; the game, the
action set); ``env_config`` overrides any of ALE's settings (``frameskip``, ``stack_num``,
``img_height``/``img_width``, ``grayscale``, ``noop_max``, ``episodic_life``,
``repeat_action_probability``, ``reward_clipping``, ...; an unknown key is an ``EnvError``
listing them). ``make_env`` gives a one-env version with the same observations (``rltrainer
evaluate``, ``compute_single_action``).
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rltrainer.errors import EnvError

#: What gymnasium ids of ALE games start with, or contain (the v0/v4 names have no namespace).
_ALE_ENTRY_POINT = "ale_py.env:AtariEnv"
INSTALL_HINT = "pip install 'rltrainer[atari]' (the ale-py package, which ships the game ROMs)"


def looks_like_atari(env: Any) -> bool:
    """An id in ALE's namespace (``ALE/...``): worth importing ale-py for."""
    return isinstance(env, str) and env.startswith("ALE/")


def register_atari(env: str) -> None:
    """Register ALE's ids with gymnasium (importing ale-py); ``EnvError`` saying what to
    install when ale-py is missing."""
    try:
        import ale_py
    except ImportError:
        raise EnvError(f"env {env!r} is an Atari game: {INSTALL_HINT}") from None
    gym.register_envs(ale_py)


def is_atari(env: Any) -> bool:
    """A gymnasium id of an ALE game (ALE's ids are registered here on first sight, so the
    documents' ``PongNoFrameskip-v4`` works as well as ``ALE/Pong-v5``)."""
    if not isinstance(env, str) or ":" in env:
        return False
    if env not in gym.registry:
        if looks_like_atari(env):
            register_atari(env)  # EnvError saying what to install
        elif importlib.util.find_spec("ale_py") is not None:
            register_atari(env)
    spec = gym.registry.get(env)
    return spec is not None and spec.entry_point == _ALE_ENTRY_POINT


def _settings(env: str, env_config: dict[str, Any]) -> dict[str, Any]:
    from ale_py.vector_env import AtariVectorEnv

    spec = gym.spec(env).kwargs
    frameskip = spec.get("frameskip", 4)
    settings = {
        "game": spec["game"],
        "repeat_action_probability": spec.get("repeat_action_probability", 0.0),
        "full_action_space": spec.get("full_action_space", False),
        "max_num_frames_per_episode": spec.get("max_num_frames_per_episode", 108000),
        "frameskip": frameskip if isinstance(frameskip, int) and frameskip > 1 else 4,
        "reward_clipping": False,
    }
    allowed = [
        name
        for name in inspect.signature(AtariVectorEnv.__init__).parameters
        if name not in ("self", "game", "num_envs", "batch_size", "autoreset_mode")
    ]
    unknown = sorted(set(env_config) - set(allowed))
    if unknown:
        raise EnvError(
            f"env {env!r}: unknown Atari setting(s) {unknown} in env_config; allowed: {', '.join(allowed)}"
        )
    return {**settings, **env_config}


def make_atari_vector(env: str, num_envs: int, env_config: dict[str, Any]) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the game on ALE's batched env, channels last (module doc)."""
    from ale_py.vector_env import AtariVectorEnv

    try:
        vector = AtariVectorEnv(num_envs=num_envs, **_settings(env, dict(env_config)))
    except (TypeError, ValueError, RuntimeError) as err:
        raise EnvError(f"could not create env {env!r} with env_config {dict(env_config)}: {err}") from err
    return _ChannelsLast(vector)


class _ChannelsLast(gym.vector.VectorWrapper):
    """ALE stacks frames first (``[N, k, H, W]``); the conv encoder reads ``[H, W, k]``."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        space = env.single_observation_space
        shape = space.shape[1:] + space.shape[:1] if len(space.shape) == 3 else space.shape + (1,)
        self.single_observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)

    @staticmethod
    def _frames(obs: np.ndarray) -> np.ndarray:
        return np.moveaxis(obs, 1, -1) if obs.ndim == 4 else obs[..., None]

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        return self._frames(obs), info

    def step(self, actions: Any) -> tuple[np.ndarray, Any, Any, Any, dict]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        return self._frames(obs), rewards, terminated, truncated, info


class AtariEnv(gym.Env):
    """One game with the same observations as ``make_atari_vector`` (a batch of one)."""

    metadata = {"render_modes": []}

    def __init__(self, env: str, env_config: dict[str, Any]) -> None:
        self._vector = make_atari_vector(env, 1, env_config)
        self.observation_space = self._vector.single_observation_space
        self.action_space = self._vector.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self._vector.reset(seed=seed, options=options)
        return obs[0], {key: value[0] for key, value in info.items() if not key.startswith("_")}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, rewards, terminated, truncated, info = self._vector.step(np.asarray([action]))
        info = {key: value[0] for key, value in info.items() if not key.startswith("_")}
        return obs[0], float(rewards[0]), bool(terminated[0]), bool(truncated[0]), info

    def close(self) -> None:
        self._vector.close()
