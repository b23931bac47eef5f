"""Every example in the README runs as written (Python blocks in order, then the CLI block)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.doc_blocks import cli_blocks, code_blocks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def sandbox_env(tmp_path: Path) -> dict[str, str]:
    """HOME in the temp dir, so the default ~/rltrainer_results lands there."""
    env = dict(os.environ, HOME=str(tmp_path))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_python_examples_run(tmp_path: Path) -> None:
    script = tmp_path / "readme_examples.py"
    script.write_text("\n\n".join(code_blocks(README, "python")))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=sandbox_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unknown key 'learning_rate'" in done.stdout


def test_cli_examples_run(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "tuned_examples", tmp_path / "tuned_examples")
    (cli_block,) = cli_blocks(README)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", cli_block],
        cwd=tmp_path,
        env=sandbox_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "mean return" in done.stdout
