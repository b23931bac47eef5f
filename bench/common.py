"""Helpers shared by the benchmarks: tuned-example lookup and result printing."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import yaml

TUNED_EXAMPLES = Path(__file__).resolve().parent.parent / "tuned_examples"


def find_tuned_example(algo: str, env: str) -> tuple[Path, dict[str, Any]]:
    """The tuned example (path, experiment spec) whose ``run`` and ``env`` match."""
    for path in sorted(TUNED_EXAMPLES.glob("*.yaml")):
        for spec in (yaml.safe_load(path.read_text()) or {}).values():
            if str(spec.get("run", "")).upper() == algo.upper() and spec.get("env") == env:
                return path, spec
    raise SystemExit(f"no tuned example in {TUNED_EXAMPLES} for --algo {algo} --env {env}")


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def print_json_line(figures: dict[str, Any]) -> None:
    """The last line of every benchmark: its figures as one JSON object."""
    print(json.dumps(figures, sort_keys=True))
