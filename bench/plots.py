"""The benchmark pages' tables and plots, drawn from the results stored in ``bench/results/``.

Each ``bench/results/<benchmark>.jsonl`` holds one JSON object per line: the figures of one
configuration, with the ``date`` it was measured, the ``machine`` it ran on and the ``command``
that reproduces it. A new measurement replaces its line (git keeps the old one), so the files hold
today's figures and the history is in git. The docs site's build (``docs/gen/hooks.py``) calls
:func:`table` and :data:`PLOTS`; ``python -m bench.plots --out DIR`` writes the same tables
(Markdown) and plots (SVG) to a folder.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: Written after every other column, in this order.
WHERE_AND_HOW = ("date", "machine", "command")
#: Not shown as columns: ``group`` is plotted, a ``note`` is written under the table, ``detail``
#: holds a benchmark's every figure (the table shows its headline ones).
HIDDEN = {"group", "note", "detail"}
#: Column headers for keys that read better in words.
HEADERS = {
    "median_s": "median time (s)",
    "range_s": "range (s)",
    "median_env_steps": "median env steps",
    "frames_per_s": "frames/s",
    "frames_per_s_runs": "frames/s per run",
    "learn_ms": "learn ms per iteration",
    "env_runners": "env runners",
    "envs_per_runner": "envs per runner",
    "steps_per_s": "env steps/s",
    "ceiling_steps_per_s": "ceiling (random actions) steps/s",
    "sampled_steps_per_s": "sampled env steps/s",
    "trained_steps_per_s": "trained env steps/s",
    "rltrainer_agent_steps_per_s": "rltrainer agent steps/s",
    "rllib_agent_steps_per_s": "RLlib 2.60 agent steps/s",
    "ratio_8_envs": "8 envs: ratio to ceiling",
    "ratio_64_envs": "64 envs: ratio to ceiling",
    "save_s": "save (s)",
    "from_checkpoint_s": "from_checkpoint (s)",
    "restore_s": "restore (s)",
    "clients_1": "1 client",
    "clients_16": "16 clients",
    "median_iterations": "median iterations",
    "gradient_steps": "gradient steps",
    "train_return": "train return (last 5 episodes)",
    "eval_return": "eval return (5 greedy episodes)",
    "gradient_steps_per_s": "gradient steps/s",
    "wall_s": "wall time (s)",
    "forward_train": "compiled forward_train",
    "complete_update": "compiled complete_update",
    "complete_update_reduce_overhead": "complete_update + reduce-overhead",
    "k": "SIGTERM after iteration",
    "checkpoint_iteration": "checkpoint's iteration",
    "exit_status": "exit status",
    "last_line_preempted": "last line preempted (",
    "iterations_once": "iterations 1..N once each",
    "sigterm_to_checkpoint_s": "SIGTERM to checkpoint (s)",
    "return_undisturbed": "final return, undisturbed",
    "return_resumed": "final return, preempted and resumed",
    "return_difference": "difference",
    "repeat_identical": "two undisturbed runs identical",
    "identical_to_checkpoint": "identical up to the checkpoint",
    "first_different_iteration": "first different iteration",
    "stream_per_s": "applied per second (— at once)",
    "all_running_s": "all Running after (s)",
    "create_to_running_p50_s": "create to Running, median (s)",
    "operator_peak_rss_mib": "operator peak RSS (MiB)",
    "steady_operator_cpu_percent": "operator CPU, steady (% of a core)",
    "steady_operator_requests_per_experiment_per_min": "operator requests per experiment per min",
    "steady_kuberay_requests_per_experiment_per_min": "KubeRay requests per experiment per min",
    "steady_operator_reconcile_p50_ms": "reconcile p50 (ms)",
    "steady_operator_reconcile_p99_ms": "reconcile p99 (ms)",
    "restart_all_current_s": "restart: all statuses current after (s)",
    "restart_first_minute_requests_per_experiment": "restart: requests per experiment, first minute",
    "load_1min": "1-min load, start - end",
    "concurrency": "trials at once",
    "pods_running_s": "cluster's Pods Running after (s)",
    "kuberay_created_pods": "Pods KubeRay made",
    "expected_pods": "1 + at once x Pods per trial",
    "all_terminated_s": "all trials terminated in the status after (s)",
    "terminated_after_driver_end_s": "terminated after the driver's end (s)",
    "succeeded_s": "Succeeded after (s)",
    "trials_operator_requests_per_min": "operator requests per min, trials running (no permission check)",
    "whole_operator_cpu_percent": "operator CPU (% of a core)",
    "status_bytes": "status size (bytes)",
}
LIBRARIES = ("rltrainer", "Stable-Baselines3", "sb3-contrib", "RLlib")
COLORS = {
    "rltrainer": "#3f51b5",
    "Stable-Baselines3": "#ff9800",
    "sb3-contrib": "#ff9800",
    "RLlib": "#4caf50",
}


def load(benchmark: str) -> list[dict[str, Any]]:
    """The rows of ``bench/results/<benchmark>.jsonl``; each must say when, where and how."""
    path = RESULTS / f"{benchmark}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for number, row in enumerate(rows, 1):
        missing = [key for key in WHERE_AND_HOW if key not in row]
        if missing:
            raise ValueError(f"{path.name} line {number}: no {', '.join(missing)}")
    return rows


def benchmarks() -> list[str]:
    """The names of the stored benchmarks."""
    return sorted(path.stem for path in RESULTS.glob("*.jsonl"))


def _format(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, list):
        return (
            " - ".join(_format(item) for item in value) if len(value) == 2 else ", ".join(map(_format, value))
        )
    return str(value).replace("|", "\\|")


def table(benchmark: str) -> str:
    """A Markdown table of a benchmark's rows: its figures, then date, machine and command."""
    rows = load(benchmark)
    keys: list[str] = []
    for row in rows:
        keys += [key for key in row if key not in keys and key not in HIDDEN and key not in WHERE_AND_HOW]
    keys += list(WHERE_AND_HOW)
    lines = [
        "| " + " | ".join(HEADERS.get(key, key.replace("_", " ")) for key in keys) + " |",
        "|" + "---|" * len(keys),
    ]
    for row in rows:
        cells = [
            f"`{row[key]}`" if key == "command" and row.get(key) else _format(row.get(key)) for key in keys
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {_format(row.get('system', ''))}: {row['note']}" for row in rows if row.get("note")]
    return "\n".join(lines + ([""] + notes if notes else []))


def _library(system: str) -> str:
    return next(name for name in (*LIBRARIES, system) if system.startswith(name))


def _svg(figure: Any) -> bytes:
    """The figure as SVG, the same bytes for the same data (no date, fixed ids)."""
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "rltrainer", "svg.fonttype": "path"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue().encode()


def _axes(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(width, height))
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    return figure, axes


def time_to_solve_plot() -> bytes:
    """Median time to the target, per task, for rltrainer and the other libraries (log scale);
    a library that did not solve shows the time it spent, hatched."""
    rows = [row for row in load("time_to_solve") if row.get("group")]
    groups = list(dict.fromkeys(row["group"] for row in rows))
    figure, axes = _axes(8, 0.9 * len(groups) + 1)
    labels, positions = [], []
    for index, group in enumerate(groups):
        members = [row for row in rows if row["group"] == group]
        for offset, row in enumerate(members):
            y = index * 4 + offset
            seconds = row["median_s"] if row["median_s"] is not None else max(row["range_s"])
            library = _library(row["system"])
            axes.barh(
                y,
                seconds,
                color=COLORS.get(library, "#9e9e9e"),
                hatch="" if row["median_s"] else "//",
                edgecolor="white",
            )
            axes.text(
                seconds * 1.05,
                y,
                f"{seconds:g} s" + ("" if row["median_s"] else " (not solved)"),
                va="center",
                fontsize=8,
            )
            labels.append(f"{group}: {row['system']}")
            positions.append(y)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    longest = max(row["median_s"] or max(row["range_s"]) for row in rows)
    axes.set_xlim(right=longest * 4)  # room for the labels
    figure.text(0, 0, "The bars of a task ran on the same kind of machine: the table names it.", fontsize=7)
    axes.set_xlabel("median wall-clock seconds to the target, process start included (log scale)")
    axes.set_title("Time to solve")
    return _svg(figure)


def throughput_plot() -> bytes:
    """IMPALA and APPO env steps sampled per second against the number of env runners."""
    rows = load("impala_appo")
    figure, axes = _axes(7, 4)
    axes.grid(axis="y", alpha=0.3)
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        name = f"{row['system']} {row['algorithm']}, {row['machine'].split(' (')[0].split(',')[0]}"
        series.setdefault(name, []).append((row["env_runners"], row["sampled_steps_per_s"]))
    for name, points in series.items():
        points.sort()
        library = _library(name)
        style = "--" if "IMPALA" in name else "-"
        axes.plot(
            *zip(*points, strict=True),
            style,
            marker="o",
            label=name,
            color=COLORS.get(library),
            alpha=1.0 if "16" not in name else 0.55,
        )
    axes.set_xlabel("env runners (0: sampling in the driver)")
    axes.set_ylabel("env steps sampled per second")
    axes.set_yscale("log")
    axes.set_title("IMPALA and APPO on CartPole-v1: throughput against env runners")
    axes.legend(fontsize=7)
    return _svg(figure)


def atari_plot() -> bytes:
    """Env frames per second while training PPO/APPO on Pong, per configuration and machine."""
    rows = load("atari")
    figure, axes = _axes(8, 0.32 * len(rows) + 1)
    for y, row in enumerate(rows):
        axes.barh(
            y,
            row["frames_per_s"],
            color=COLORS.get(_library(row["system"]), "#9e9e9e"),
            alpha=1.0 if "H200" in row["machine"] else 0.75,
        )
        axes.text(row["frames_per_s"] * 1.01, y, f"{row['frames_per_s']:,}", va="center", fontsize=7)
    axes.set_xlim(right=max(row["frames_per_s"] for row in rows) * 1.12)  # room for the labels
    machine = ["H200 GPU" if "H200" in row["machine"] else "2-core CPU" for row in rows]
    axes.set_yticks(
        range(len(rows)),
        [
            f"{m}: {row['system']}, {row['variant']}, {row['env_runners']} runners"
            for m, row in zip(machine, rows, strict=True)
        ],
        fontsize=7,
    )
    axes.invert_yaxis()
    axes.set_xlabel("env frames per second while training (PongNoFrameskip-v4)")
    axes.set_title("PPO and APPO from pixels")
    return _svg(figure)


def operator_scale_plot() -> bytes:
    """The operator against the number of experiments (``bench.operator_scale``): its API
    requests per experiment per minute in steady state, KubeRay's beside them, and its memory."""
    rows = sorted(
        (
            row
            for row in load("operator_scale")
            if row.get("stream_per_s") is None and row.get("kuberay_concurrency", 1) == 1
        ),
        key=lambda row: row["experiments"],
    )
    figure, (requests, memory) = _axes_pair(9, 3.5)
    counts = [row["experiments"] for row in rows]
    for key, label, color in (
        ("steady_operator_requests_per_experiment_per_min", "rltrainer operator", COLORS["rltrainer"]),
        ("steady_kuberay_requests_per_experiment_per_min", "KubeRay's operator", "#9e9e9e"),
    ):
        requests.plot(counts, [row[key] for row in rows], "-o", label=label, color=color)
    requests.set_xlabel("experiments Running (as many simulated nodes)")
    requests.set_ylabel("API requests per experiment per minute")
    requests.set_ylim(bottom=0)
    requests.legend(fontsize=7)
    requests.set_title("Steady state", fontsize=9)
    memory.plot(counts, [row["operator_peak_rss_mib"] for row in rows], "-o", color=COLORS["rltrainer"])
    memory.set_xlabel("experiments")
    memory.set_ylabel("operator peak RSS (MiB)")
    memory.set_ylim(bottom=0)
    memory.set_title("Memory", fontsize=9)
    figure.suptitle("The operator at scale")
    return _svg(figure)


def _axes_pair(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, pair = plt.subplots(1, 2, figsize=(width, height))
    for axes in pair:
        axes.grid(alpha=0.3)
        axes.set_axisbelow(True)
    return figure, pair


#: The plots' file names and the functions that draw them.
PLOTS: dict[str, Callable[[], bytes]] = {
    "time_to_solve.svg": time_to_solve_plot,
    "throughput_runners.svg": throughput_plot,
    "atari_frames.svg": atari_plot,
    "operator_scale.svg": operator_scale_plot,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for the tables (.md) and plots (.svg)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in benchmarks():
        (args.out / f"{name}.md").write_text(table(name) + "\n")
    for name, draw in PLOTS.items():
        (args.out / name).write_bytes(draw())
    print(json.dumps({"tables": len(benchmarks()), "plots": sorted(PLOTS)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
