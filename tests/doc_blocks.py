"""Fenced code blocks of a Markdown file, for the tests that run the documents' examples
(tests/test_readme.py, tests/test_docs.py).

A block opens with a line of three or more backticks (or tildes) followed by its language
(```python, ```bash) and closes with a line of at least as many of the same character. A
block whose opening fence is preceded (blank lines aside) by the line ``<!-- not-run -->`` is
shown to readers but not run: for commands that cannot run in a test (a cluster's kubectl).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

NOT_RUN = "<!-- not-run -->"
_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language (the info string's first word), its text, where it opens."""

    language: str
    code: str
    line: int  # 1-based line number of the opening fence
    run: bool  # False: marked <!-- not-run -->


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
        blocks.append(
            Block(
                language=info[0].lower() if info else "",
                code=body + "\n" if body else "",
                line=index + 1,
                run=previous != NOT_RUN,
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


def cli_blocks(source: str | Path) -> list[str]:
    """The runnable ``bash`` blocks that start with an ``rltrainer`` command."""
    return [block for block in code_blocks(source, "bash") if block.lstrip().startswith("rltrainer")]
