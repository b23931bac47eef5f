"""Videos and on-screen rendering of training episodes: RLlib's ``record_env`` (``monitor``) and
``render_env``, on the first sub-env of one env runner (the driver's when it samples, else
remote runner 1; likewise among the evaluation runners).

``EpisodeVideos`` writes the episodes gymnasium's ``RecordVideo`` would pick (its default
schedule: episodes 0, 1, 8, 27, ... 729, 1000, then every 1000th) as mp4 files through
imageio's ffmpeg, a frame after the reset and after every step, streamed as they come.
gymnasium's own wrapper needs moviepy, which rltrainer does not install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym

from rltrainer.errors import ConfigError


def capped_cubic(episode_id: int) -> bool:
    """gymnasium's default video schedule: perfect cubes up to 1000, then every 1000th episode."""
    if episode_id < 1000:
        return round(episode_id ** (1 / 3)) ** 3 == episode_id
    return episode_id % 1000 == 0


def check_renders(env: gym.Env, env_name: str, mode: str, setting: str) -> None:
    """``ConfigError`` unless ``env`` renders in ``mode`` (``setting`` names the key asking)."""
    if env.render_mode != mode:
        raise ConfigError(
            f"{setting}: env {env_name!r} was made with render_mode={env.render_mode!r}, and {setting} "
            f"needs render_mode={mode!r}; gymnasium ids get it from rltrainer, an env creator or class "
            f"of your own must set it (e.g. from env_config['render_mode'])"
        )


def check_display(setting: str = "render_env") -> None:
    """Refuse on-screen rendering where no display exists (a Linux machine without X or Wayland)."""
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        raise ConfigError(
            f"{setting}=True renders episodes in a window and this machine has no display (DISPLAY and "
            "WAYLAND_DISPLAY are unset); record videos instead with record_env=True (or a folder)"
        )


def resolve_videos(config: Any, trial_dir: Any) -> str | None:
    """In the driver at ``build()``: ``record_env``'s folder (``True``: ``trial_dir()/videos``),
    created now so that one that cannot be written fails there; ``render_env`` needs a display."""
    if config.render_env and not config.record_env:
        check_display()
    if not config.record_env:
        return None
    from rltrainer.storage import writable_folder

    wanted = Path(trial_dir()) / "videos" if config.record_env is True else Path(config.record_env)
    folder, problem = writable_folder(wanted)
    if problem is not None:
        raise ConfigError(
            f"record_env: videos cannot be written to {str(folder)!r} ({problem}); "
            "allowed: False, True (<trial folder>/videos) or a writable folder"
        )
    return str(folder)


def video_role(config: Any, worker_index: int, num_workers: int) -> str | None:
    """The render mode the first sub-env of this env runner is made with: ``"rgb_array"``
    (``record_env``; it wins over ``render_env``) or ``"human"`` (``render_env``) on the driver's
    runner when it samples, else on runner 1 of its group; None elsewhere."""
    if not (config.record_env or config.render_env) or config.env is None:
        return None
    if worker_index != (1 if num_workers > 0 else 0):
        return None
    return "rgb_array" if config.record_env else "human"


def mp4_writer(path: str | Path, env: gym.Env) -> Any:
    """An imageio writer streaming ``env``'s frames to an mp4 at ``path``, at its ``render_fps``."""
    import imageio.v2 as imageio  # only videos need imageio and its ffmpeg

    # macro_block_size=2: even sizes are all H.264 (yuv420p) needs; 16 would resize most frames.
    return imageio.get_writer(path, fps=env.metadata.get("render_fps", 30), macro_block_size=2)


class EpisodeVideos(gym.Wrapper):
    """Record ``env``'s episodes that ``trigger(episode_id)`` picks to
    ``<folder>/<prefix>-episode-<id>.mp4`` (``env`` renders ``rgb_array`` frames)."""

    def __init__(self, env: gym.Env, folder: str | Path, prefix: str, trigger: Any = capped_cubic) -> None:
        super().__init__(env)
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.trigger = trigger
        self.episode_id = -1
        self._writer: Any = None
        self.paths: list[Path] = []  # the videos written so far

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._finish()
        obs, info = self.env.reset(**kwargs)
        self.episode_id += 1
        if self.trigger(self.episode_id):
            path = self.folder / f"{self.prefix}-episode-{self.episode_id}.mp4"
            self._writer = mp4_writer(path, self.env)
            self.paths.append(path)
            self._frame()
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._writer is not None:
            self._frame()
            if terminated or truncated:
                self._finish()
        return obs, reward, terminated, truncated, info

    def _frame(self) -> None:
        frame = self.env.render()
        if frame is not None:
            self._writer.append_data(frame)

    def _finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        self._finish()
        super().close()
