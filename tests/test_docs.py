"""Every example of the user guide (docs/*.md) runs as written: per page, its Python blocks in
order in one process, then its bash blocks with ``bash -euo pipefail``, in a temporary folder
that is also HOME (as tests/test_readme.py runs the README's). A block marked
``<!-- not-run -->`` is skipped (tests/doc_blocks.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import cli_blocks, code_blocks, fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
#: Shell languages that would only be shown: a docs page writes its commands as ```bash blocks.
SHOWN_ONLY_SHELLS = {"sh", "shell", "console", "zsh"}


def sandbox_env(tmp_path: Path) -> dict[str, str]:
    """HOME in the temp dir, so the default ~/rltrainer_results lands there; the venv's
    ``rltrainer`` first on PATH."""
    env = dict(os.environ, HOME=str(tmp_path))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


#: The pages with examples to run (the index has none).
EXAMPLE_PAGES = [page for page in PAGES if code_blocks(page, "python") or code_blocks(page, "bash")]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_guide_has_pages() -> None:
    assert {page.name for page in PAGES} >= {
        "README.md",
        "training_api.md",
        "trainer_era.md",
        "cli.md",
        "results.md",
    }


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=[page.name for page in EXAMPLE_PAGES])
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    python, bash = code_blocks(page, "python"), code_blocks(page, "bash")
    env = sandbox_env(tmp_path)
    if python:
        script = tmp_path / f"{page.stem}_examples.py"
        script.write_text("\n\n".join(python))
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{page.name}'s Python examples failed:\n{done.stderr[-3000:]}"
    if any("tuned_examples/" in block for block in bash):
        shutil.copytree(ROOT / "tuned_examples", tmp_path / "tuned_examples")
    for number, block in enumerate(bash, 1):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"{page.name}'s bash block {number} failed:\n{block}\n--- stdout:\n{done.stdout[-2000:]}"
            f"\n--- stderr:\n{done.stderr[-3000:]}"
        )


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_no_example_is_shown_but_never_run(page: Path) -> None:
    """A docs page's commands are ```bash blocks (run); another shell language would only be
    shown, so it must say so with <!-- not-run -->."""
    unmarked = [
        f"line {block.line}: ```{block.language}"
        for block in fenced_blocks(page.read_text())
        if block.language in SHOWN_ONLY_SHELLS and block.run
    ]
    assert not unmarked, (
        f"{page.name}: write these as ```bash blocks, or mark them <!-- not-run -->: {unmarked}"
    )


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_links_between_pages_resolve(page: Path) -> None:
    """Links to other Markdown files (and their headings) lead somewhere."""
    missing = []
    for target, fragment in re.findall(r"\]\(([^)#\s]+\.md)(?:#([^)\s]*))?\)", page.read_text()):
        linked = page.parent / target
        if not linked.is_file():
            missing.append(target)
        elif fragment:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
            if fragment not in {anchor(heading) for heading in headings}:
                missing.append(f"{target}#{fragment}")
    assert not missing, f"{page.name} links to what is not there: {missing}"


def test_the_collector_reads_fences_languages_and_the_opt_out() -> None:
    markdown = "\n".join(
        [
            "Text.",
            "```python",
            "print(1)",
            "```",
            "<!-- not-run -->",
            "",
            "```bash",
            "kubectl apply -f x.yaml",
            "```",
            "- a list item:",
            "  ````bash title=run",
            "  rltrainer --help",
            "  ```nested",
            "  ````",
            "~~~text",
            "```",
            "~~~",
        ]
    )
    blocks = fenced_blocks(markdown)
    assert [(b.language, b.run, b.line) for b in blocks] == [
        ("python", True, 2),
        ("bash", False, 7),
        ("bash", True, 11),
        ("text", True, 15),
    ]
    assert blocks[2].code == "rltrainer --help\n```nested\n"
    assert code_blocks(markdown, "bash") == ["rltrainer --help\n```nested\n"]
    assert len(code_blocks(markdown, "bash", include_not_run=True)) == 2
    assert cli_blocks(markdown) == ["rltrainer --help\n```nested\n"]
    with pytest.raises(ValueError, match="line 1: code block ```python is never closed"):
        fenced_blocks("```python\nprint(1)\n")
