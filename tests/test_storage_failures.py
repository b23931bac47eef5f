"""Local storage that cannot be used or fills up: one clear line, no traceback, nothing corrupted.

The full disk is a real one: a small tmpfs mounted for the test (needs root, as CI runs here;
skipped with the reason otherwise). A read-only folder is a read-only tmpfs, since root may
write into any folder whatever its mode.
"""

from __future__ import annotations

import csv
import json
import logging
import subprocess
from pathlib import Path

import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.checkpoints import Checkpoint
from rltrainer.cli import main
from rltrainer.storage import StorageError

FAST = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}


@pytest.fixture
def tmpfs(tmp_path: Path):
    """``mount(size, read_only=False)`` -> a fresh tmpfs folder; all unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str, read_only: bool = False) -> Path:
        target = tmp_path / f"tmpfs{len(mounted)}"
        target.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


def fill(folder: Path, leave: int) -> Path:
    """Fill ``folder``'s filesystem up to ``leave`` free bytes with one file; returns it."""
    import os

    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


def train_args(storage: Path | str, *extra: str) -> list[str]:
    return [
        "train", "--algo", "PPO", "--env", "CartPole-v1", "--config", json.dumps(FAST),
        "--storage-path", str(storage), "--name", "run", *extra,
    ]  # fmt: skip


def one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:") or line.startswith("rltrainer:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", ["missing-parent", "a-file", "under-a-file", "read-only"])
def test_an_unusable_storage_path_fails_at_start_with_one_line(case, tmp_path, tmpfs, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    path = {
        "missing-parent": Path("/proc/forbidden/runs"),
        "a-file": a_file,
        "under-a-file": a_file / "runs",
        "read-only": (tmpfs("64k", read_only=True) if case == "read-only" else tmp_path) / "runs",
    }[case]
    assert main(train_args(path, "--stop", '{"training_iteration": 1}')) == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"storage_path '{path}' is not a folder rltrainer can write to" in line, line
    with pytest.raises(StorageError, match="is not a folder rltrainer can write to"):
        PPOConfig().environment("CartPole-v1").training(**FAST).reporting(storage_path=str(path)).build()


def test_a_full_disk_skips_checkpoints_keeps_results_whole_and_fails_the_final_save(tmpfs, capsys, caplog):
    storage = tmpfs("96k")  # the results fit for a while; no checkpoint (about 1.6 MB) ever does
    caplog.set_level(logging.INFO, logger="rltrainer")
    args = train_args(storage, "--stop", '{"training_iteration": 30}', "--checkpoint-freq", "1")
    assert main([*args, "--checkpoint-at-end"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "training ended after 30 iteration(s), but checkpoint_at_end failed" in line, line
    assert "No space left on device" in line, line
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    skipped = [w for w in warnings if w.startswith("checkpoint of iteration")]
    assert len(skipped) == 30, warnings  # every periodic one tried, warned about, and training went on
    assert any("could not write to" in w for w in warnings), warnings  # the results filled the disk too
    (trial,) = [p for p in (storage / "run").iterdir() if p.is_dir()]
    # No half-written checkpoint folder is left behind.
    assert not [p.name for p in trial.iterdir() if p.name.startswith("checkpoint_")]
    assert not [p.name for p in trial.rglob(".*tmp")]
    # result.json: whole lines only, iterations 1, 2, 3, ... up to where the disk filled.
    rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    assert 1 <= len(rows) < 30
    assert [row["training_iteration"] for row in rows] == list(range(1, len(rows) + 1))
    with open(trial / "progress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert table and all(None not in row and all(v is not None for v in row.values()) for row in table)
    assert [int(row["training_iteration"]) for row in table] == list(range(1, len(table) + 1))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(trial))
    events.Reload()
    steps = [event.step for event in events.Scalars("rltrainer/training_iteration")]
    assert steps and steps == sorted(steps)


def test_a_periodic_checkpoint_tries_again_once_there_is_room(tmpfs, caplog):
    storage = tmpfs("8m")
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(**FAST)
        .reporting(storage_path=str(storage))
        .checkpointing(checkpoint_frequency=1)
        .build()
    )
    try:
        filler = fill(storage, leave=40_000)  # room for the results, not for a checkpoint
        with caplog.at_level(logging.WARNING, logger="rltrainer"):
            assert "checkpoint_path" not in algo.train()
        assert any("No space left on device" in r.getMessage() for r in caplog.records)
        assert not list(algo.trial_dir.glob("checkpoint_*"))
        filler.unlink()
        saved = algo.train()["checkpoint_path"]
        assert Checkpoint.load(saved).metadata["counters"]["training_iteration"] == 2
    finally:
        algo.stop()


@pytest.mark.parametrize("verb", ["list", "inspect", "download"])
def test_checkpoints_commands_on_a_missing_path_exit_2(verb, tmp_path, capsys):
    args = ["checkpoints", verb, str(tmp_path / "nothing")]
    if verb == "download":
        args.append(str(tmp_path / "target"))
    assert main(args) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "does not exist" in line, line
