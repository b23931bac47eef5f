"""MinAtar's games by their gymnasium ids (``MinAtar/Breakout-v1``): registered on first sight in
whichever process makes the env (driver or remote runner), boolean 10x10 frames into RLlib's
default 10x10 conv filters, and what a user without the package is told."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env import registry
from rltrainer.errors import EnvError

pytest.importorskip("minatar", reason="the minatar extra: pip install 'rltrainer[minatar]'")


def breakout(num_env_runners: int) -> PPOConfig:
    return (
        PPOConfig()
        .environment("MinAtar/Breakout-v1")
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"vf_share_layers": True})
        .debugging(seed=0)
    )


def test_breakout_trains_in_the_driver_on_boolean_frames():
    algo = breakout(0).build()
    try:
        assert algo.observation_space == spaces.Box(0, 1, (10, 10, 4), bool)
        assert algo.action_space == spaces.Discrete(3)
        # RLlib's default filters for 10x10 frames: 16 of 5x5 at 2, then 32 of 5x5 at 2 ("valid")
        assert algo.get_policy().model.trunk.out_size == 32
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 64  # valid steps: resets add a few
        action = algo.compute_single_action(np.zeros((10, 10, 4), bool), explore=False)
        assert action in (0, 1, 2)
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_a_remote_runner_registers_the_ids_itself():
    algo = breakout(1).build()
    try:
        assert algo.train()["num_env_steps_sampled"] >= 64
    finally:
        algo.stop()


def test_without_the_package_the_user_is_told_what_to_install(monkeypatch):
    games = ("no_such_games.gym", "register_envs", "pip install no-such-games")
    monkeypatch.setitem(registry._NAMESPACES, "NoSuchGames/", games)
    with pytest.raises(EnvError, match=r"'NoSuchGames/Pong-v0' needs the NoSuchGames games: pip install no-"):
        PPOConfig().environment("NoSuchGames/Pong-v0").build()
