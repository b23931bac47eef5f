"""The README is the front page: short, its examples run as written, its manifest is a valid
RLExperiment, and every link leads to a file (and heading) that exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.doc_blocks import cli_blocks, code_blocks, run_python_pages, sandbox_env
from tests.test_docs import anchor

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The issue's bound for a front page (#41): what does not fit belongs in the docs site.
MAX_LINES = 250


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines; move what is not a front page to docs/"
    )
    dated = [line for line in lines if re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b", line)]
    assert not dated, f"the README tells no dates (history is git's): {dated}"


def test_python_examples_run(tmp_path: Path) -> None:
    report = run_python_pages([README], ROOT, tmp_path, sandbox_env(tmp_path), timeout=300)
    assert report["README"] is None, report["README"]
    assert "unknown key 'learning_rate'" in (tmp_path / "README" / "output.txt").read_text()


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


def test_the_manifest_is_a_valid_experiment() -> None:
    from rltrainer_operator.models import RLExperiment

    (manifest,) = [yaml.safe_load(block) for block in code_blocks(README, "yaml")]
    experiment = RLExperiment.model_validate(manifest)
    assert experiment.spec.algorithm == "PPO"


def test_every_link_resolves() -> None:
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, fragment = target.partition("#")
        linked = ROOT / path
        if not linked.exists():
            missing.append(target)
        elif fragment:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
            if fragment not in {anchor(heading) for heading in headings}:
                missing.append(target)
    assert not missing, f"README.md links to what is not there: {missing}"
