"""``record_env`` (RLlib 1.x's ``monitor``) and ``render_env``: videos of training episodes on
one env runner, on-screen rendering where there is a display (``rltrainer.env.video``)."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.video import capped_cubic
from rltrainer.errors import ConfigError


def ppo(tmp_path: Path, **environment) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1", **environment)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, rollout_fragment_length=100)
        .training(train_batch_size=200, minibatch_size=100, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path / "results"))
        .debugging(seed=0)
    )


def frames(path: Path) -> int:
    with imageio.get_reader(path) as reader:
        return sum(1 for _ in reader)


def test_gymnasiums_schedule():
    picked = [i for i in range(3000) if capped_cubic(i)]
    assert picked == [0, 1, 8, 27, 64, 125, 216, 343, 512, 729, 1000, 2000]


def test_record_env_writes_the_first_sub_envs_episodes_into_the_trial_folder(tmp_path):
    algo = ppo(tmp_path, record_env=True).build()
    try:
        algo.train()
        videos = algo.trial_dir / "videos" / "training"
        runner = algo.env_runner_group.local_worker()
        recorder = runner.env.envs[0]
        written = sorted(videos.glob("*.mp4"))
        assert written and written[0].name == "runner-0-episode-0.mp4"
        # Episode 0 ended within the iteration (a random policy on CartPole): the reset's frame,
        # then one per step, at least 8 steps.
        assert recorder.episode_id >= 1
        assert frames(written[0]) >= 9
        # Copy 1 records nothing; the runner's spaces and sampling are as without videos.
        assert not isinstance(runner.env.envs[1], type(recorder))
    finally:
        algo.stop()


def test_monitor_is_record_env_and_a_folder_is_used_as_given(tmp_path):
    config = PPOConfig.from_dict({**ppo(tmp_path).to_dict(), "monitor": str(tmp_path / "vids")})
    assert config.record_env == str(tmp_path / "vids")
    algo = config.build()
    try:
        algo.train()
        assert sorted((tmp_path / "vids" / "training").glob("runner-0-episode-*.mp4"))
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_remote_runner_one_records(tmp_path):
    config = ppo(tmp_path, record_env=str(tmp_path / "vids")).env_runners(num_env_runners=2)
    algo = config.build()
    try:
        algo.train()
        names = sorted(p.name for p in (tmp_path / "vids" / "training").glob("*.mp4"))
        assert names and all(name.startswith("runner-1-") for name in names)
    finally:
        algo.stop()


def test_env_that_does_not_render_frames_is_refused_at_build(tmp_path):
    config = ppo(tmp_path, record_env=True).environment("tests.envs:BoxObsEnv")
    with pytest.raises(ConfigError, match=r"record_env: env .* needs render_mode='rgb_array'.*env_config"):
        config.build()


def test_unwritable_folder_is_refused_at_build(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"record_env: videos cannot be written to .*allowed: False, True"):
        ppo(tmp_path, record_env=str(blocker / "videos")).build()


def test_render_env_needs_a_display(tmp_path, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(ConfigError, match=r"render_env=True renders episodes in a window.*record_env=True"):
        ppo(tmp_path, render_env=True).build()
