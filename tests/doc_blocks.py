"""Fenced code blocks of a Markdown file, for the tests that run the documents' examples
(tests/test_readme.py, tests/test_docs.py).

A block opens with a line of three or more backticks (or tildes) followed by its language
(```python, ```bash) and closes with a line of at least as many of the same character. A
block whose opening fence is preceded (blank lines aside) by the line ``<!-- not-run -->`` (or
``<!-- not-run: REASON -->``) is shown to readers but not run: for commands that cannot run in a
test (a cluster's kubectl) or take minutes.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

NOT_RUN = "<!-- not-run -->"
_NOT_RUN = re.compile(r"^<!-- not-run(?:: (?P<reason>[^>]+?))? -->$")
_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language (the info string's first word), its text, where it opens."""

    language: str
    code: str
    line: int  # 1-based line number of the opening fence
    run: bool  # False: marked <!-- not-run -->
    reason: str = ""  # why it is not run, from <!-- not-run: REASON -->


def fenced_blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order (an indented block, e.g. in a list, dedented)."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    previous = ""  # the last non-blank line outside a block
    index = 0
    while index < len(lines):
        opening = _OPENING.match(lines[index])
        if opening is None:
            if lines[index].strip():
                previous = lines[index].strip()
            index += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"line {index + 1}: code block {fence}{opening['info']} is never closed")
        body = textwrap.dedent("\n".join(lines[index + 1 : end]))
        info = opening["info"].split()
        marker = _NOT_RUN.match(previous)
        blocks.append(
            Block(
                language=info[0].lower() if info else "",
                code=body + "\n" if body else "",
                line=index + 1,
                run=marker is None,
                reason=(marker["reason"] or "") if marker else "",
            )
        )
        previous = ""
        index = end + 1
    return blocks


def code_blocks(source: str | Path, language: str, *, include_not_run: bool = False) -> list[str]:
    """The text of each ``language`` block of a Markdown file (a ``Path``) or string, in order;
    blocks marked ``<!-- not-run -->`` only with ``include_not_run``."""
    markdown = source.read_text() if isinstance(source, Path) else source
    return [
        block.code
        for block in fenced_blocks(markdown)
        if block.language == language and (block.run or include_not_run)
    ]


def python_source(page: Path) -> str:
    """The page's runnable Python blocks as one program, each block on its own lines of the page
    (blank lines between), so a traceback's line numbers are the page's."""
    lines: list[str] = []
    for block in fenced_blocks(page.read_text()):
        if block.language == "python" and block.run:
            lines += [""] * (block.line - len(lines))
            lines += block.code.splitlines()
    return "\n".join(lines) + "\n"


def cli_blocks(source: str | Path) -> list[str]:
    """The runnable ``bash`` blocks that start with an ``rltrainer`` command."""
    return [block for block in code_blocks(source, "bash") if block.lstrip().startswith("rltrainer")]


def sandbox_env(home: Path) -> dict[str, str]:
    """The examples' environment: HOME in a temporary folder (so the default
    ~/rltrainer_results lands there) and the venv's ``rltrainer`` first on PATH."""
    import os
    import sys

    env = dict(os.environ, HOME=str(home))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def site_pages(docs: Path) -> list[Path]:
    """The documentation site's Markdown pages under ``docs`` (the generators in docs/gen aside)."""
    return sorted(page for page in docs.rglob("*.md") if "gen" not in page.relative_to(docs).parts[:1])


def page_slug(page: Path, root: Path) -> str:
    """A folder name for a page: its path under ``root`` with slashes as double underscores."""
    return str(page.relative_to(root).with_suffix("")).replace("/", "__")


def run_python_pages(pages: list[Path], root: Path, workdir: Path, env: dict[str, str], timeout: int) -> dict:
    """Each page's Python blocks, in order, in ONE fresh interpreter: every page in its own
    namespace, its own folder ``workdir/<slug>`` (also its HOME) and with its own time limit, so
    the interpreter's imports (torch, Ray) are paid once for all pages. Returns
    ``{slug: None | "what failed"}``."""
    import json
    import subprocess
    import sys

    report = workdir / "report.json"
    jobs = [(page_slug(page, root), str(page)) for page in pages]
    done = subprocess.run(
        # -P: the tests folder is not put on the path (its operator/ would shadow the stdlib).
        [sys.executable, "-P", __file__, str(report), str(timeout), json.dumps(jobs)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout * len(jobs) + 60,
    )
    if not report.is_file():
        raise RuntimeError(f"the page runner stopped early:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(report.read_text())


def _run_pages_here(report: str, timeout: int, jobs: list[tuple[str, str]]) -> None:
    """The page runner's own process (``python tests/doc_blocks.py REPORT TIMEOUT JOBS``)."""
    import contextlib
    import json
    import os
    import signal
    import time
    import traceback

    def too_long(*_: object) -> None:
        raise TimeoutError(f"the page's examples took more than {timeout} s")

    signal.signal(signal.SIGALRM, too_long)
    results: dict[str, str | None] = {}
    start_dir = Path.cwd()
    for slug, page in jobs:
        folder = start_dir / slug
        folder.mkdir(exist_ok=True)
        os.chdir(folder)
        os.environ["HOME"] = str(folder)
        source = python_source(Path(page))
        started = time.monotonic()
        output = folder / "output.txt"
        with output.open("w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            signal.alarm(timeout)
            try:
                exec(compile(source, page, "exec"), {"__name__": "__main__", "__file__": page})  # noqa: S102
                results[slug] = None
            except BaseException:  # noqa: BLE001 - every failure is the page's, reported by name
                results[slug] = traceback.format_exc()[-4000:]
            finally:
                signal.alarm(0)
        # How long each page took, for whoever wonders where the suite's time goes.
        (folder / "seconds.txt").write_text(f"{time.monotonic() - started:.1f}\n")
        if results[slug] is not None:
            results[slug] += "\n--- the page's output:\n" + output.read_text()[-2000:]
    Path(report).write_text(json.dumps(results))


if __name__ == "__main__":
    import json
    import sys

    _run_pages_here(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))
