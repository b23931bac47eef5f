"""``rltrainer train`` sweeping on S3: killed mid-sweep (the driver and the Ray instance it
started), run again with ``--resume``, it continues the trials from their checkpoints and its
best checkpoint evaluates. End to end (two Ray instances, about a minute): ``make e2e``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rltrainer.cli import main
from tests.conftest import use_s3_identity
from tests.e2e.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, real_s3):
    """The real S3 server (its bucket ``exists``) with the pods' identity: the AWS variables a
    subprocess inherits."""
    use_s3_identity(monkeypatch, real_s3)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def s3_keys(prefix: str) -> list[str]:
    import boto3

    # A session of its own: the default session keeps the first credentials it resolved (another
    # test's server's keys, in the same process), whatever the environment says now.
    listing = boto3.session.Session().client("s3").list_objects_v2(Bucket="exists", Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def snapshot_trials(prefix: str) -> dict[str, tuple[str, int]]:
    """``{trial folder: (status, last training_iteration)}`` from Tune's newest experiment
    snapshot on S3 (``experiment_state-*.json``): what a resume restores each trial from (a trial
    resumes from the checkpoint of its last result there, or from nothing; a TERMINATED one does not
    run again). Empty while there is no snapshot."""
    import boto3

    names = sorted(key for key in s3_keys(prefix) if "/experiment_state-" in key)
    if not names:
        return {}
    body = boto3.session.Session().client("s3").get_object(Bucket="exists", Key=names[-1])["Body"].read()
    trials = {}
    for state, run in json.loads(body)["trial_data"]:
        state, run = json.loads(state), json.loads(run)
        trials[state["relative_logdir"]] = (
            state["status"],
            (run["last_result"] or {}).get("training_iteration", 0),
        )
    return trials


def both_checkpointed_and_running(prefix: str) -> dict[str, tuple[str, int]] | None:
    trials = snapshot_trials(prefix)
    ready = len(trials) == 2 and all(status == "RUNNING" and it >= 2 for status, it in trials.values())
    return trials if ready else None


@pytest.mark.usefixtures("s3_env")
def test_a_sweep_on_s3_killed_resumes_and_its_best_checkpoint_evaluates(tmp_path, capsys):
    config = {
        "lr": {"grid_search": [0.001, 0.0001]},
        "train_batch_size": 200,
        "minibatch_size": 100,
        "num_epochs": 1,
        "checkpoint_frequency": 1,
        "min_time_s_per_iteration": 1.0,  # slow enough to be killed mid-sweep
    }
    argv = [
        sys.executable, "-m", "rltrainer", "train", "--algo", "PPO", "--env", "CartPole-v1",
        "--config", json.dumps(config), "--stop", '{"training_iteration": 5}',
        "--storage-path", "s3://exists/cli-sweep", "--name", "sweep", "--resume",
    ]  # fmt: skip
    # Tune snapshots the experiment (which checkpoints each trial has) every 10 s or more by
    # default; every second here, so that the kill lands after a snapshot that lists some.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "", "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    first = subprocess.Popen(
        argv,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Killed once the snapshot on S3 lists both trials running with 2 checkpoints or more: the
        # checkpoints on S3 that no snapshot lists yet (Tune uploads it asynchronously, late on a
        # loaded machine) are not what a resume promises to use.
        wait_for(
            "a snapshot with both trials running and checkpointed twice",
            lambda: both_checkpointed_and_running("cli-sweep/sweep/"),
            180,
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and the Ray instance it started
        first.wait()
    at_kill = snapshot_trials("cli-sweep/sweep/")  # may have moved on since the check, not back
    assert any(status != "TERMINATED" for status, _ in at_kill.values()), at_kill
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "trials: 2 TERMINATED" in done.stdout
    from rltrainer.storage import open_storage

    experiment = open_storage("s3://exists/cli-sweep/sweep")
    trials = {key.split("/")[2] for key in s3_keys("cli-sweep/sweep/PPO_")}
    assert len(trials) == 2
    for trial in trials:
        rows = [json.loads(line) for line in experiment.read_bytes(f"{trial}/result.json").splitlines()]
        assert rows[-1]["training_iteration"] == 5
        # Each trial the snapshot had running resumed from its checkpoint there (none of those
        # iterations ran again); a trial it had finished did not run again.
        status, iteration = at_kill[trial]
        since_restore = 5 - iteration if status != "TERMINATED" else 5
        assert rows[-1]["iterations_since_restore"] == since_restore, (
            at_kill,
            [r["training_iteration"] for r in rows],
        )
    best = re.search(r"best checkpoint: (\S+)", done.stdout).group(1)
    assert best.startswith("s3://exists/cli-sweep/sweep/PPO_CartPole-v1_")
    assert main(["evaluate", best, "--episodes", "1"]) == 0
    assert "mean return" in capsys.readouterr().out
    progress = json.loads(experiment.read_bytes("progress.json"))
    assert progress["trials"] == {"TERMINATED": 2} and progress["best_checkpoint"] == best
