"""Every example of the documentation site (docs/**/*.md) runs as written: the Python blocks of
all pages in one interpreter, each page in its own namespace and folder (also its HOME), in
order; then each page's bash blocks with ``bash -euo pipefail`` in that folder. A block marked
``<!-- not-run -->`` is skipped (tests/doc_blocks.py): only shell commands that need a cluster.
The site's build and its pages in a browser: tests/test_docs_site.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.doc_blocks import (
    code_blocks,
    fenced_blocks,
    page_slug,
    run_python_pages,
    sandbox_env,
    site_pages,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = site_pages(DOCS)
IDS = [str(page.relative_to(DOCS)) for page in PAGES]
#: Shell languages that would only be shown: a docs page writes its commands as ```bash blocks.
SHOWN_ONLY_SHELLS = {"sh", "shell", "console", "zsh"}
#: Commands a not-run block may hold: they need a cluster (or are the developer's make targets).
#: Any other not-run block says why: ``<!-- not-run: takes minutes -->``.
CLUSTER_COMMANDS = re.compile(
    r"(^|[\s(])(kubectl|helm|make|source|docker|podman)\s|python -m rltrainer_operator"
)
#: Each page's examples get this long (seconds).
PAGE_TIMEOUT = 300
#: The tests that share ``pages_run``: the first of them holds the whole run of every page's
#: Python (about 70 CPU-s; over 300 s of wall time on a machine busy with other work), so their
#: last guard is the run's, not one test's (pytest-timeout counts a fixture's setup in its test).
PAGES_RUN_TIMEOUT = pytest.mark.timeout(1800)


PYTHON_PAGES = [page for page in PAGES if code_blocks(page, "python")]
BASH_PAGES = [page for page in PAGES if code_blocks(page, "bash")]


@pytest.fixture(scope="module")
def pages_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The Python examples of every page, run once (one interpreter: imports paid once)."""
    workdir = tmp_path_factory.mktemp("docs")
    for page in PAGES:  # every page's folder, also for pages with bash blocks only
        (workdir / page_slug(page, DOCS)).mkdir()
        if any("tuned_examples/" in block for block in code_blocks(page, "bash")):
            shutil.copytree(ROOT / "tuned_examples", workdir / page_slug(page, DOCS) / "tuned_examples")
    report = run_python_pages(PYTHON_PAGES, DOCS, workdir, sandbox_env(workdir), PAGE_TIMEOUT)
    seconds = {path.parent.name: float(path.read_text()) for path in workdir.glob("*/seconds.txt")}
    print("slowest pages (s):", sorted(seconds.items(), key=lambda item: -item[1])[:5])
    return workdir, report


def test_the_site_has_its_sections() -> None:
    names = {str(page.relative_to(DOCS)) for page in PAGES}
    assert {
        "index.md",
        "guide/training-api.md",
        "guide/cli.md",
        "guide/results.md",
        "migrating/index.md",
        "migrating/trainer-era.md",
        "platform/rlexperiment.md",
        "benchmarks.md",
        "changelog.md",
    } <= names
    assert any(name.startswith("design/") for name in names)
    assert any(name.startswith("api/") for name in names)


@PAGES_RUN_TIMEOUT
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(DOCS)) for p in PYTHON_PAGES])
def test_page_python_examples_run(page: Path, pages_run: tuple[Path, dict[str, Any]]) -> None:
    _, report = pages_run
    failure = report[page_slug(page, DOCS)]
    assert failure is None, f"{page.relative_to(DOCS)}'s Python examples failed:\n{failure}"


@PAGES_RUN_TIMEOUT
@pytest.mark.parametrize("page", BASH_PAGES, ids=[str(p.relative_to(DOCS)) for p in BASH_PAGES])
def test_page_bash_examples_run(page: Path, pages_run: tuple[Path, dict[str, Any]]) -> None:
    workdir, _ = pages_run
    folder = workdir / page_slug(page, DOCS)
    for number, block in enumerate(code_blocks(page, "bash"), 1):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=folder,
            env=sandbox_env(folder),
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT,
        )
        assert done.returncode == 0, (
            f"{page.relative_to(DOCS)}'s bash block {number} failed:\n{block}\n--- stdout:\n"
            f"{done.stdout[-2000:]}\n--- stderr:\n{done.stderr[-3000:]}"
        )


@pytest.mark.parametrize("page", PAGES, ids=IDS)
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


def test_only_cluster_commands_are_not_run() -> None:
    """The not-run list stays small: no Python example is skipped, and a skipped shell block's
    commands are ones that need a cluster (kubectl, helm, the operator's stack)."""
    skipped = []
    for page in PAGES:
        for block in fenced_blocks(page.read_text()):
            if block.run:
                continue
            where = f"{page.relative_to(DOCS)} line {block.line}"
            if block.language == "python":
                skipped.append(f"{where}: a Python example")
            commands = [
                line
                for line in block.code.replace("\\\n", " ").splitlines()
                if line.strip() and not line.lstrip().startswith("#")
            ]
            needs_a_cluster = any(CLUSTER_COMMANDS.search(line) for line in commands)
            if block.language in {"bash", *SHOWN_ONLY_SHELLS} and not needs_a_cluster and not block.reason:
                skipped.append(f"{where}: no cluster command in it, and no reason given")
    assert not skipped, f"examples marked <!-- not-run --> that could run: {skipped}"


#: What a lab notebook says and a user's page does not: dates and times of runs, and who ran what
#: where. A figure's date and machine belong in bench/results/*.jsonl.
DIARY = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d UTC\b|\bthis session\b|\ban hour earlier\b|\bborrowed\b"
)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_pages_speak_of_the_project_not_of_its_history(page: Path) -> None:
    found = [match.group(0) for match in DIARY.finditer(page.read_text())]
    assert not found, f"{page.relative_to(DOCS)} reads like a diary: {found} (figures go to bench/results)"


def anchor(heading: str) -> str:
    """The anchor of a heading as mkdocs' toc writes it: lower case, punctuation dropped,
    spaces as hyphens."""
    heading = re.sub(r"\{#([^}]+)\}\s*$", "", heading)
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_links_between_pages_resolve(page: Path) -> None:
    """Links to other Markdown files (and their headings) lead somewhere (the strict site build
    checks it too; this says which page in a second)."""
    missing = []
    for target, fragment in re.findall(r"\]\(([^)#\s]+\.md)(?:#([^)\s]*))?\)", page.read_text()):
        linked = (page.parent / target).resolve()
        if not linked.is_file():
            missing.append(target)
        elif fragment:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), flags=re.MULTILINE)
            if fragment not in {anchor(heading) for heading in headings}:
                missing.append(f"{target}#{fragment}")
    assert not missing, f"{page.relative_to(DOCS)} links to what is not there: {missing}"


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
            "<!-- not-run: takes minutes -->",
            "```bash",
            "python -m bench.atari",
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
    assert [(b.language, b.run, b.line, b.reason) for b in blocks] == [
        ("python", True, 2, ""),
        ("bash", False, 7, ""),
        ("bash", False, 11, "takes minutes"),
        ("bash", True, 15, ""),
        ("text", True, 19, ""),
    ]
    assert blocks[3].code == "rltrainer --help\n```nested\n"
    assert code_blocks(markdown, "bash") == ["rltrainer --help\n```nested\n"]
    assert len(code_blocks(markdown, "bash", include_not_run=True)) == 3
    with pytest.raises(ValueError, match="line 1: code block ```python is never closed"):
        fenced_blocks("```python\nprint(1)\n")


def test_the_page_runner_keeps_pages_apart_and_names_the_failing_one(tmp_path: Path) -> None:
    """One interpreter for all pages, but a name defined on one page is not seen by the next,
    each page runs in its own folder, and a failure is reported for its page only."""
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "a.md").write_text("```python\nimport os\nshared = 1\nopen('made-here', 'w').close()\n```\n")
    (docs / "guide" / "b.md").write_text("```python\nprint(shared)\n```\n")
    (docs / "c.md").write_text("```python\nimport os\nassert os.path.exists(os.path.expanduser('~/'))\n```\n")
    work = tmp_path / "work"
    work.mkdir()
    pages = [docs / "a.md", docs / "guide" / "b.md", docs / "c.md"]
    report = run_python_pages(pages, docs, work, sandbox_env(work), timeout=60)
    assert report["a"] is None and report["c"] is None
    assert "NameError: name 'shared' is not defined" in report["guide__b"]
    assert 'b.md", line 2' in report["guide__b"]  # the page's own line
    assert (work / "a" / "made-here").is_file()
