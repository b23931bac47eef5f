"""`rltrainer train` sweeps: grid_search in a tuned YAML file (a killed sweep resumed on S3: tests/e2e)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rltrainer.cli import main

SWEEP_FILE = """\
cartpole-sweep:
  env: CartPole-v1
  run: PPO
  stop: {training_iteration: 2}
  config:
    lr: {grid_search: [0.001, 0.0001]}
    train_batch_size: 400
    minibatch_size: 100
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
