"""``Algorithm`` and the CLI stay readable in one sitting (ARCHITECTURE.md: a module over ~500
lines is two rooms waiting to be named), their public import paths stay, and the evaluation
loop does not import the algorithm module that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rltrainer"


@pytest.mark.parametrize(
    "module",
    [
        "algorithms/algorithm.py",
        "algorithms/checkpointing.py",
        "algorithms/policy_access.py",
        "cli.py",
        "commands/train.py",
        "commands/evaluate.py",
    ],
)
def test_module_is_under_500_lines(module: str) -> None:
    assert len((ROOT / module).read_text().splitlines()) <= 500


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top, in functions or under TYPE_CHECKING."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_evaluation_loop_does_not_import_the_algorithm_module() -> None:
    assert "rltrainer.algorithms.algorithm" not in _imported_modules(ROOT / "algorithms/evaluation_loop.py")


def test_public_import_paths_are_kept() -> None:
    from rltrainer.algorithms.algorithm import Algorithm, Counters, custom_metric_summary, episode_metrics
    from rltrainer.cli import ProgressReporter, UsageError, build_parser, main, read_experiment_file

    assert (
        callable(episode_metrics) and callable(custom_metric_summary) and Counters().training_iteration == 0
    )
    assert {"save", "restore", "from_checkpoint", "get_policy", "compute_single_action", "trial_dir"} <= set(
        dir(Algorithm)
    )
    assert build_parser().prog == "rltrainer" and callable(main) and issubclass(UsageError, ValueError)
    assert ProgressReporter.COLUMNS and callable(read_experiment_file)
