"""Atari games on ALE's batched env with DeepMind's preprocessing (``rltrainer.env.atari``):
``uint8`` 84x84x4 frames into the default conv stack, checkpoints evaluated on the one-env
version, ``env_config`` overrides, and what a user without ale-py is told."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main
from rltrainer.env import EnvContext
from rltrainer.env.registry import make_env
from rltrainer.errors import EnvError

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("ale_py", reason="the atari extra: pip install 'rltrainer[atari]'")


def pong(tmp_path: Path, env: str = "ALE/Pong-v5", **env_config) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config=env_config, clip_rewards=True)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
        .training(train_batch_size=32, minibatch_size=32, num_epochs=1, model={"vf_share_layers": True})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


def test_pong_trains_on_uint8_frames_and_its_checkpoint_evaluates(tmp_path, capsys):
    algo = pong(tmp_path).build()
    try:
        assert algo.observation_space == spaces.Box(0, 255, (84, 84, 4), np.uint8)
        assert algo.get_policy().model.trunk.out_size == 256  # RLlib's 84x84 filters end 1x1x256
        rollout = algo.env_runner_group.local_worker()._rollout(2, explore=True)
        assert rollout.obs.dtype == np.uint8 and rollout.obs.shape == (2, 2, 84 * 84 * 4)
        result = algo.train()
        assert result["num_env_steps_sampled"] == 32
        checkpoint = algo.save()
    finally:
        algo.stop()
    assert main(["evaluate", checkpoint, "--steps", "40"]) == 0
    assert "episode 1: return=" in capsys.readouterr().out


def test_the_documents_noframeskip_ids_and_env_config_overrides(tmp_path):
    env = make_env("PongNoFrameskip-v4", EnvContext({"stack_num": 2, "img_height": 42, "img_width": 42}))
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (42, 42, 2) and obs.dtype == np.uint8
        obs, reward, *_ = env.step(0)
        assert obs.shape == (42, 42, 2) and isinstance(reward, float)
    finally:
        env.close()
    with pytest.raises(
        EnvError, match=r"unknown Atari setting\(s\) \['frame_skip'\] in env_config; allowed: .*frameskip"
    ):
        pong(tmp_path, frame_skip=2).build()


def test_without_ale_py_the_user_is_told_what_to_install(tmp_path):
    argv = ["train", "--algo", "PPO", "--env", "ALE/Breakout-v5", "--storage-path", str(tmp_path)]
    code = (
        "import sys; sys.modules['ale_py'] = None\n"
        f"from rltrainer.cli import main\nraise SystemExit(main({argv!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "env 'ALE/Breakout-v5' is an Atari game: pip install 'rltrainer[atari]'" in done.stderr
