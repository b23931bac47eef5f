"""mkdocs hooks (mkdocs.yml ``hooks:``): the site's generated parts, made at build time from the
code and the stored data, so they cannot drift from either.

A page asks for a part with a line ``<!-- generated: KIND NAME -->``:

- ``rlexperiment spec|status``: the RLExperiment reference tables (docs/gen/rlexperiment.py);
- ``migration TABLE``: a table of older and current names (docs/gen/migration.py);
- ``benchmark NAME``: the table of ``bench/results/NAME.jsonl`` (bench/plots.py);
- ``parts tested``: the real components the platform is tested with and their pinned versions
  (operator/rltrainer_operator/testing/parts.toml), so the versions documented are those tested.

The benchmark plots (bench/plots.py's ``PLOTS``) are added to the site as ``img/benchmarks/*.svg``.
An unknown part fails the build.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "operator", Path(__file__).resolve().parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

# Imported now: mkdocs restores sys.path once this module is loaded.
import migration  # noqa: E402
import rlexperiment  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

from bench import plots  # noqa: E402

PLOT_FOLDER = "img/benchmarks"
PART = re.compile(
    r"^(?P<indent>[ \t]*)<!-- generated: (?P<kind>[\w-]+) (?P<name>[\w-]+) -->$", flags=re.MULTILINE
)


def _part(kind: str, name: str) -> str:
    if kind == "rlexperiment":
        return rlexperiment.render(name)
    if kind == "migration":
        return migration.TABLES[name]()
    if kind == "benchmark":  # its rows one line each (docs/stylesheets/extra.css), scrolled sideways
        return f'<div class="benchmark-table" markdown>\n\n{plots.table(name)}\n\n</div>'
    if kind == "parts" and name == "tested":
        return _parts_table()
    raise KeyError(kind)


#: What each part of parts.toml is in the tests (the file says how it is built and checked).
PART_ROLES = {
    "kuberay": "KubeRay's operator: makes the RayClusters' Pods and Services, with its own CRDs and RBAC",
    "coredns": "the nodes' cluster DNS (its `kubernetes` plugin): workers find the head by name",
    "seaweedfs": "the S3 server (its S3 gateway, identities with their own keys and bucket rights)",
    "kuberay-below-floor": "its CRDs only: the operator must refuse to start on them",
    "kueue": "the queues of a shared cluster: admits a RayCluster as one workload, suspends and preempts it",
    "kwok": "nodes without kubelets (the scale check, `bench.operator_scale`): Pods bound there turn Ready",
}


def _parts_table() -> str:
    parts = tomllib.loads((ROOT / "operator" / "rltrainer_operator" / "testing" / "parts.toml").read_text())
    rows = ["| part | Go module | version | in the tests |", "|---|---|---|---|"]
    for name, part in parts.items():
        rows.append(f"| {name} | `{part['module']}` | {part['version']} | {PART_ROLES[name]} |")
    return "\n".join(rows)


def on_files(files: Files, config: Any) -> Files:
    for name, draw in plots.PLOTS.items():
        files.append(File.generated(config, f"{PLOT_FOLDER}/{name}", content=draw()))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        try:
            text = _part(match["kind"], match["name"])  # indented as the line asking for it (in a list)
            return "\n".join(match["indent"] + line if line else line for line in text.splitlines())
        except (KeyError, FileNotFoundError) as error:
            raise ValueError(f"{page.file.src_uri}: no generated part {match[0]!r} ({error})") from error

    return PART.sub(replace, markdown)
