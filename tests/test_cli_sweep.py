"""`rltrainer train` sweeps: grid_search in a tuned YAML file (a killed sweep resumed on S3: tests/e2e)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from rltrainer.cli import main

SWEEP_FILE = """\
cartpole-sweep:
  env: CartPole-v1
  run: PPO
  stop: {training_iteration: 2}
  config:
    lr: {grid_search: [0.001, 0.0001]}
    # small iterations: the test is about the sweep, not what its trials learn
    train_batch_size: 64
    minibatch_size: 64
    num_epochs: 1
    model: {fcnet_hiddens: [16]}
"""


@pytest.mark.usefixtures("local_ray")
def test_a_tuned_file_with_grid_search_runs_one_trial_per_value(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP_FILE)
    results = tmp_path / "results"
    argv = ["train", "file", str(path), "--storage-path", str(results), "--checkpoint-at-end"]
    assert main([*argv, "--max-concurrent-trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "search spaces: lr" in out and "trials: 2 TERMINATED" in out
    experiment = results / "cartpole-sweep"
    trials = sorted(experiment.glob("PPO_*"))
    assert len(trials) == 2 and all((trial / "result.json").exists() for trial in trials)
    progress = json.loads((experiment / "progress.json").read_text())
    assert progress["sweep"] is True and progress["finished"] is True
    assert progress["trials"] == {"TERMINATED": 2}
    best = re.search(r"best checkpoint: (\S+)", out).group(1)
    assert best == progress["best_checkpoint"] and Path(best, "rltrainer_checkpoint.json").exists()
    assert re.search(r'best config: \{"lr": 0\.000?1\}', out)
    # The usual tools read a sweep's checkpoints.
    assert main(["checkpoints", "list", str(experiment)]) == 0
    assert main(["evaluate", best, "--episodes", "1"]) == 0


class FakeTrial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id, self.status = trial_id, "RUNNING"

    def __str__(self) -> str:
        return f"PPO_{self.trial_id}"


def test_progress_names_the_trial_the_summary_names(tmp_path):
    """Tune's get_best_result judges each trial by its last value (the first trial wins a tie);
    progress.json did by the best value any iteration had, so the two could disagree."""
    from rltrainer.tune.sweep import SweepProgress

    progress = SweepProgress(str(tmp_path), None, "env_runners/episode_return_mean", "max")
    a, b, c = FakeTrial("a"), FakeTrial("b"), FakeTrial("c")
    trials = [a, b, c]

    def report(trial: FakeTrial, value: float) -> None:
        progress.on_trial_result(trials, trial, {"env_runners": {"episode_return_mean": value}})

    report(a, 90.0)  # a's best value ...
    report(b, 40.0)
    report(c, 60.0)
    report(a, 20.0)  # ... is not its last
    report(b, 60.0)  # b ties c: the earlier trial wins
    report(c, float("nan"))  # c's last value is not finite: it is not judged
    for trial in trials:
        progress.on_checkpoint(trials, trial, SimpleNamespace(path=str(tmp_path / trial.trial_id)))
    progress.on_experiment_end(trials)
    written = json.loads((tmp_path / "progress.json").read_text())
    assert (written["best_trial"], written["best_metric"]) == ("PPO_b", 60.0)
    assert written["best_checkpoint"] == str(tmp_path / "b") and written["finished"] is True
