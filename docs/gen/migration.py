"""The migration page's tables, generated from the tables the code itself reads, so a name the
code accepts cannot be missing here and a name listed here cannot be one the code refuses:

- ``rltrainer.algorithms.aliases``: ``ALIASES`` (older setting names) and ``DOCUMENTED_SETTINGS``
  (settings with no field, their accepted values and why);
- builder methods that are another method under an older name (``.rollouts()``);
- ``rltrainer.results.EPISODE_ALIASES`` (result keys of RLlib's old API stack);
- ``rltrainer.agents.<algo>``: the Trainer-era packages and their ``<ALGO>Trainer`` names;
- ``rltrainer.cli_compat``: RLlib's ``rllib train``/``rllib rollout`` flags.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
from typing import Any

import rltrainer.agents
from rltrainer import cli_compat
from rltrainer.algorithms import AlgorithmConfig
from rltrainer.algorithms.aliases import ALIASES, DOCUMENTED_SETTINGS, AnyOf
from rltrainer.results import EPISODE_ALIASES


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def settings() -> str:
    """Older setting names and the field each sets."""
    rows = [f"| `{old}` | `{new}` |" for old, new in sorted(ALIASES.items())]
    return "\n".join(["| RLlib's older name | rltrainer's field |", "|---|---|", *rows])


def _accepted(value: Any) -> str:
    values = value if isinstance(value, AnyOf) else (value,)
    return " or ".join(f"`{json.dumps(one)}`" for one in values)


def documented_settings() -> str:
    """Settings of RLlib's documents with no field: the accepted value(s) and why."""
    rows = [
        f"| `{name}` | {_accepted(value)} | {_cell(why)} |"
        for name, (value, why) in sorted(DOCUMENTED_SETTINGS.items())
    ]
    return "\n".join(["| setting | accepted | why there is no field |", "|---|---|---|", *rows])


def builder_methods() -> str:
    """Builder methods reachable under an older name (the same function object)."""
    rows = []
    for name, member in inspect.getmembers(AlgorithmConfig, inspect.isfunction):
        own = member.__module__.startswith("rltrainer.")
        if own and not name.startswith("_") and member.__name__ != name:
            rows.append(f"| `.{name}()` | `.{member.__name__}()` |")
    return "\n".join(["| older builder method | current method |", "|---|---|", *sorted(rows)])


def result_keys() -> str:
    """Result keys in RLlib's old API stack and today's."""
    rows = [f"| `{old}` | `{new}` |" for new, old in sorted(EPISODE_ALIASES.items())]
    return "\n".join(["| RLlib's older key | rltrainer's key (both are reported) |", "|---|---|", *rows])


def trainer_classes() -> str:
    """``rltrainer.agents.<algo>.<ALGO>Trainer`` and the class it is today."""
    rows = []
    for info in pkgutil.iter_modules(rltrainer.agents.__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"rltrainer.agents.{info.name}")
        for name in getattr(module, "__all__", []):
            if name.endswith("Trainer"):
                current = getattr(module, name)
                package = current.__module__.rsplit(".", 1)[0]
                rows.append(
                    f"| `rltrainer.agents.{info.name}.{name}` | `{package}.{current.__name__}` | "
                    f"`rltrainer.agents.{info.name}.DEFAULT_CONFIG` |"
                )
    header = ["| Trainer-era class | current class | its defaults as a dict |", "|---|---|---|"]
    return "\n".join([*header, *sorted(rows)])


def _flag_rows(add_flags: Any, command: str) -> list[str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_flags(parser)
    rows = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its actions
        if action.option_strings and action.help != argparse.SUPPRESS:
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
            rows.append(f"| `{command}` | {flags} | {_cell(action.help or '')} |")
    return rows


def cli_flags() -> str:
    """RLlib's command-line flags: what each does here, or why it is refused."""
    rows = _flag_rows(cli_compat.add_train_flags, "train") + _flag_rows(
        cli_compat.add_rollout_flags, "rollout"
    )
    return "\n".join(["| command | RLlib's flag | in rltrainer |", "|---|---|---|", *rows])


TABLES = {
    "settings": settings,
    "documented-settings": documented_settings,
    "builder-methods": builder_methods,
    "result-keys": result_keys,
    "trainer-classes": trainer_classes,
    "cli-flags": cli_flags,
}
