"""The tuned PPO CartPole example trained to a return, for tests that need a trained policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rltrainer.algorithms.ppo import PPOConfig

TUNED_EXAMPLE = Path(__file__).parent.parent / "tuned_examples" / "ppo_cartpole.yaml"


def tuned_ppo_config(storage_path: Any, seed: int = 0) -> PPOConfig:
    """``tuned_examples/ppo_cartpole.yaml``'s config, results under ``storage_path``, seeded."""
    (experiment,) = yaml.safe_load(TUNED_EXAMPLE.read_text()).values()
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .update_from_dict(experiment["config"])
        .reporting(storage_path=str(storage_path))
        .debugging(seed=seed)
    )


def train_to(algo: Any, mean_return: float, max_steps: int = 100_000) -> dict[str, Any]:
    """``train()`` until the smoothed return reaches ``mean_return`` (fails past ``max_steps``)."""
    result = algo.train()
    while result["episode_return_mean"] < mean_return and result["timesteps_total"] < max_steps:
        result = algo.train()
    assert result["episode_return_mean"] >= mean_return, "PPO did not learn"
    return result
