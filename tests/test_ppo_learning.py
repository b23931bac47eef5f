"""PPO learns: the tuned CartPole example reaches its stop return within its budget."""

from __future__ import annotations

from pathlib import Path

import yaml

from rltrainer.algorithms.ppo import PPOConfig

TUNED_EXAMPLE = Path(__file__).parent.parent / "tuned_examples" / "ppo_cartpole.yaml"


def test_ppo_solves_cartpole(tmp_path):
    (experiment,) = yaml.safe_load(TUNED_EXAMPLE.read_text()).values()
    assert experiment["run"] == "PPO"
    stop = experiment["stop"]
    config = (
        PPOConfig()
        .environment(experiment["env"])
        .update_from_dict(experiment["config"])
        # Evaluated once at the end (evaluation_interval stays None), greedily.
        .evaluation(evaluation_duration=10, evaluation_config={"explore": False})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        result = algo.train()
        while (
            result["episode_return_mean"] < stop["episode_return_mean"]
            and result["timesteps_total"] < stop["timesteps_total"]
        ):
            result = algo.train()
        assert result["episode_return_mean"] >= 475, (
            f"not solved in {result['timesteps_total']} steps: return {result['episode_return_mean']:.1f}"
        )
        evaluation = algo.evaluate()["evaluation"]
        assert evaluation["episodes_this_iter"] == 10
        assert evaluation["episode_return_mean"] >= 475
    finally:
        algo.stop()
