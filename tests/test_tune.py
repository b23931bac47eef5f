"""Algorithms under Ray Tune: Tuner by name and by class, tune.run, schedulers that restore
(ASHA, PBT), a killed trial resuming from its checkpoint, and bad sweeps failing once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from ray import tune
from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.dqn.dqn import DQN
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.errors import ConfigError
from rltrainer.tune.analysis import get_trial_checkpoints_paths

pytestmark = pytest.mark.usefixtures("local_ray")

# Small PPO iterations: a sweep's trials take about a second each. The trials sample in their own
# process (no env runner actors: 3 processes importing torch per trial otherwise, most of these
# tests' time); the tests about a trial's actors ask for a remote runner themselves.
FAST = {
    "env": "CartPole-v1",
    "num_env_runners": 0,
    "train_batch_size": 400,
    "minibatch_size": 100,
    "num_epochs": 2,
}
# Smaller still where a test is about Tune's plumbing, not about what the trials learn.
TINY = {
    "env": "CartPole-v1",
    "num_env_runners": 0,
    "train_batch_size": 64,
    "minibatch_size": 64,
    "num_epochs": 1,
    "model": {"fcnet_hiddens": [16]},
}


def run_config(tmp_path: Path, name: str, stop: dict, **kwargs) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=str(tmp_path), stop=stop, verbose=0, **kwargs)


def test_grid_by_name_and_best_checkpoint_restores(tmp_path):
    config = PPOConfig().update_from_dict(TINY).training(lr=tune.grid_search([1e-3, 3e-4, 0.0]))
    results = tune.Tuner(
        "PPO",
        param_space=config,
        run_config=run_config(
            tmp_path,
            "grid",
            {"training_iteration": 2},
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True),
        ),
    ).fit()
    assert not results.errors
    assert sorted(result.config["lr"] for result in results) == [0.0, 3e-4, 1e-3]
    assert {result.metrics["training_iteration"] for result in results} == {2}
    best = results.get_best_result(metric="episode_reward_mean", mode="max")
    # Tune's checkpoint folder holds our files: a manifest, safetensors and npz, no pickle.
    files = sorted(path.name for path in Path(best.checkpoint.path).iterdir())
    assert "rltrainer_checkpoint.json" in files and "policy.safetensors" in files
    assert not [name for name in files if name.endswith((".pkl", ".pickle"))]
    # Tune's result files land in one folder per trial under the experiment folder.
    assert (Path(best.path) / "result.json").exists() and (Path(best.path) / "progress.csv").exists()
    algo = Algorithm.from_checkpoint(best.checkpoint)
    try:
        assert type(algo).__name__ == "PPO"
        assert algo.iteration == 2 and algo.config.lr == best.config["lr"]
        assert algo.compute_single_action([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    finally:
        algo.stop()


def test_tune_run_with_the_class_and_its_analysis(tmp_path):
    analysis = tune.run(
        DQN,
        # short iterations (each samples 1000 steps by default) of a small network
        config={
            "env": "CartPole-v1",
            "num_steps_sampled_before_learning_starts": 100,
            "min_sample_timesteps_per_iteration": 200,
            "rollout_fragment_length": 20,
            "model": {"fcnet_hiddens": [16]},
            "hiddens": [16],
        },
        stop={"training_iteration": 2},
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
        storage_path=str(tmp_path),
        name="run",
        verbose=0,
    )
    [trial] = analysis.trials
    assert trial.last_result["training_iteration"] == 2
    # Ray 2.60's analysis lost get_trial_checkpoints_paths; rltrainer.tune.analysis has it.
    paths = get_trial_checkpoints_paths(analysis, trial, metric="training_iteration")
    assert [iteration for _, iteration in paths] == [1, 2]
    assert all(Path(path, "rltrainer_checkpoint.json").exists() for path, _ in paths)
    last = analysis.get_last_checkpoint(trial)
    algo = Algorithm.from_checkpoint(last)
    try:
        assert type(algo).__name__ == "DQN" and algo.iteration == 2
    finally:
        algo.stop()


class RecordPlacement(DefaultCallbacks):
    """Reports whether the trial's actors run in Tune's placement group (not one of their own)."""

    def on_train_result(self, *, algorithm, result, **kwargs) -> None:
        result["in_trial_group"] = not algorithm._placement.owned


def short_cartpole(env_config):
    import gymnasium as gym

    return gym.make("CartPole-v1", max_episode_steps=env_config.get("steps", 10))


def test_an_env_registered_with_tunes_register_env(tmp_path):
    """RLlib's documents register custom envs with Tune's ``register_env``: the name reaches the
    driver's runner, remote runners and Tune's trial actors."""
    tune.register_env("tune-registered-cartpole", short_cartpole)
    config = PPOConfig().update_from_dict({**TINY, "env": "tune-registered-cartpole", "num_env_runners": 1})
    algo = config.environment(env_config={"steps": 7}).build()
    try:
        assert algo.train()["episode_len_mean"] <= 7
        assert algo.evaluate()["evaluation"]["episode_len_mean"] <= 7
    finally:
        algo.stop()
    results = tune.Tuner(
        "PPO",
        param_space={**TINY, "env": "tune-registered-cartpole", "env_config": {"steps": 5}},
        run_config=run_config(tmp_path, "registered", {"training_iteration": 1}),
    ).fit()
    assert not results.errors
    assert results[0].metrics["episode_len_mean"] <= 5


def test_trial_actors_use_the_trial_placement_group(tmp_path):
    config = {**TINY, "num_env_runners": 1, "callbacks_class": RecordPlacement}
    bundles = PPO.default_resource_request(PPOConfig().update_from_dict(config).to_dict()).bundles
    assert bundles == [{"CPU": 1.0}, {"CPU": 1.0}]  # the driver (the trial actor), then the env runner
    results = tune.Tuner(
        "PPO",
        param_space=PPOConfig().update_from_dict(config),
        run_config=run_config(tmp_path, "pg", {"training_iteration": 1}),
    ).fit()
    assert not results.errors
    assert results[0].metrics["in_trial_group"] is True
    assert results[0].metrics["num_healthy_env_runners"] == 1


def test_asha_stops_the_bad_trials(tmp_path):
    scheduler = ASHAScheduler(max_t=4, grace_period=1, reduction_factor=2)
    results = tune.Tuner(
        "PPO",
        param_space={**FAST, "seed": 1, "lr": tune.grid_search([1e-2, 3e-3, 0.0, 0.0])},
        # one trial at a time: ASHA's promotions depend on the order trials reach a rung, which
        # concurrent trials on 2 cores do not fix (all 4 were once promoted in CI)
        tune_config=tune.TuneConfig(
            metric="episode_reward_mean", mode="max", scheduler=scheduler, max_concurrent_trials=1
        ),
        run_config=run_config(tmp_path, "asha", {"training_iteration": 4}),
    ).fit()
    assert not results.errors
    iterations = sorted(result.metrics["training_iteration"] for result in results)
    assert iterations[0] < 4 and iterations[-1] == 4, iterations


def test_pbt_exploits_and_the_copy_continues_from_the_donor(tmp_path):
    # Different batch sizes: after an exploit, the copy's counters are the donor's (PBT copies
    # the donor's config and checkpoint), which its own could never have reached.
    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        quantile_fraction=0.5,
        synch=True,  # both trials reach each perturbation point before PBT compares them
        hyperparam_mutations={"lr": [1e-3, 5e-4]},
    )
    results = tune.Tuner(
        "PPO",
        param_space={
            **FAST,
            "lr": 1e-3,
            "train_batch_size": tune.grid_search([200, 600]),
            "minibatch_size": 100,
        },
        tune_config=tune.TuneConfig(metric="episode_reward_mean", mode="max", scheduler=scheduler),
        run_config=run_config(tmp_path, "pbt", {"training_iteration": 3}),
    ).fit()
    assert not results.errors
    # A restored trial's first result says iterations_since_restore == 1 past iteration 1. With
    # synch, PBT pauses both trials at the perturbation point and restores both: the one that
    # exploited from the other's checkpoint, the other from its own. The exploit is the restore
    # whose starting counters are not its own previous ones.
    frames = [result.metrics_dataframe for result in results]
    table = ["training_iteration", "iterations_since_restore", "timesteps_total", "num_env_steps_sampled"]
    tables = [frame[table].to_string() for frame in frames]  # every column, in a failure message

    def start_of(row) -> int:  # the counters the restored trial started from
        return int(row.timesteps_total - row.num_env_steps_sampled)

    def own_counters(frame, iteration: int) -> int | None:  # the trial's first row at an iteration
        found = frame.loc[frame.training_iteration == iteration, "timesteps_total"]
        return int(found.iloc[0]) if len(found) else None

    # Compared with the trial's own counters at the iteration it restarted from. On a busy
    # machine a trial may run past the perturbation point before PBT pauses it (its restore from
    # its own checkpoint then follows a later row), and PBT may clone a donor that ran past it
    # (the copy's frame has no row for the donor's last iteration).
    exploits = [
        (index, row)
        for index, frame in enumerate(frames)
        for _, row in frame.iterrows()
        if row.iterations_since_restore == 1
        and row.training_iteration > 1
        and start_of(row) != own_counters(frame, row.training_iteration - 1)
    ]
    assert exploits, tables

    def cloned_at(index: int, row) -> list[int]:  # the donor's counters where the copy was made
        donor = frames[1 - index]
        return [
            int(steps)
            for steps in donor.loc[donor.training_iteration == row.training_iteration - 1, "timesteps_total"]
        ]

    # The copy continues from the donor's counters at the donor's iteration it was cloned at (its
    # own could not have reached them: the trials sample 200 and 600 steps per iteration), with
    # the donor's config (batch size). A loaded machine can make a trial's own restore look like
    # an exploit above (its row at that iteration replaced by a later run's); the copy is the
    # one that starts from the donor's counters.
    copies = [(index, row) for index, row in exploits if start_of(row) in cloned_at(index, row)]
    assert copies, tables
    index, row = copies[0]
    assert row["config/train_batch_size"] == frames[1 - index]["config/train_batch_size"].iloc[0]


class KillOnce(DefaultCallbacks):
    """SIGKILLs the trial's process at its third iteration, once (a marker in the trial folder)."""

    def on_train_result(self, *, algorithm, result, **kwargs) -> None:
        marker = Path(algorithm.trial_dir) / "killed_once"
        if result["training_iteration"] == 3 and not marker.exists():
            marker.write_text("1")
            os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_trial_resumes_from_its_last_checkpoint(tmp_path):
    results = tune.Tuner(
        "PPO",
        param_space={**TINY, "callbacks_class": KillOnce},
        run_config=run_config(
            tmp_path,
            "killed",
            {"training_iteration": 4},
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2),
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    assert not results.errors
    final = results[0].metrics
    assert final["training_iteration"] == 4
    # Restored from iteration 2's checkpoint: two iterations since the restore, counters carried on.
    assert final["iterations_since_restore"] == 2
    assert final["timesteps_total"] >= 4 * TINY["train_batch_size"]


def test_a_search_space_on_a_rejected_value_fails_at_the_builder():
    with pytest.raises(ConfigError, match=r"search space of 'lr' can take -1.0, which is not allowed"):
        PPOConfig().training(lr=tune.grid_search([1e-3, -1.0]))
    with pytest.raises(ConfigError, match=r"search space of 'num_epochs' can take 0"):
        PPOConfig().training(num_epochs=tune.randint(0, 5))
    config = PPOConfig().environment("CartPole-v1").training(lr=tune.loguniform(1e-5, 1e-2))
    assert config.search_space == {"lr": config.to_dict()["lr"]}
    with pytest.raises(ConfigError, match=r"lr: search spaces are resolved by Ray Tune"):
        config.build()


def test_an_empty_or_unlisted_grid_fails_at_the_builder():
    """Tune's trial generator fails on an empty grid with an IndexError; the builder names it."""
    grid = r"a grid_search takes a non-empty list of values"
    with pytest.raises(ConfigError, match=rf"search space of 'lr' is \{{'grid_search': \[\]\}}: {grid}"):
        PPOConfig().training(lr=tune.grid_search([]))
    with pytest.raises(ConfigError, match=rf"search space of 'lr' is \{{'grid_search': 0.1\}}: {grid}"):
        PPOConfig().update_from_dict({"lr": {"grid_search": 0.1}})
    with pytest.raises(ConfigError, match=rf"search space of 'model' is .*: {grid}"):
        PPOConfig().training(model={"fcnet_hiddens": {"grid_search": []}})


def test_an_unknown_key_in_param_space_fails_the_sweep_once(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'lrr' \(did you mean 'lr'\?\)"):
        tune.Tuner(
            "PPO",
            param_space={**TINY, "lrr": tune.grid_search([1e-3, 1e-4])},
            run_config=run_config(tmp_path, "bad", {"training_iteration": 1}),
        ).fit()
