"""Run a snippet in a fresh interpreter: for what only a process's first imports show."""

from __future__ import annotations

import subprocess
import sys


def python_output(code: str) -> str:
    """``code``'s stripped stdout in a new ``python -c`` (its stderr in the failure if it fails)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
