"""Folders the CLI writes into (``evaluate --video``, ``checkpoints download``): one line naming
the folder and why it cannot be written, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
    )
    algo = config.build()
    try:
        return algo.save(str(tmp_path_factory.mktemp("ckpt") / "checkpoint_000000"))
    finally:
        algo.stop()


@pytest.fixture
def unwritable(tmp_path: Path) -> Path:
    """A folder below a regular file: no one can create it, root included."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    return blocker / "folder"


def _one_line_error(capsys: pytest.CaptureFixture, folder: Path) -> str:
    err = capsys.readouterr().err
    assert err.startswith("rltrainer: error: ") and err.count("\n") == 1, err
    assert str(folder) in err and "Traceback" not in err
    return err


def test_evaluate_video_into_an_unwritable_folder(
    checkpoint: str, unwritable: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["evaluate", checkpoint, "--episodes", "1", "--video", str(unwritable)]) == 2
    assert "--video" in _one_line_error(capsys, unwritable)


def test_download_into_an_unwritable_folder(
    checkpoint: str, unwritable: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["checkpoints", "download", checkpoint, str(unwritable)]) == 2
    assert "Not a directory" in _one_line_error(capsys, unwritable)


def test_download_into_a_writable_folder_still_works(
    checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["checkpoints", "download", checkpoint, str(tmp_path / "copy")]) == 0
    assert "sha256 verified" in capsys.readouterr().out
    assert (tmp_path / "copy" / "policy.safetensors").is_file()
