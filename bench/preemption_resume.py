"""What a preemption costs in final return: ``rltrainer train`` stopped by a SIGTERM, then resumed.

    python -m bench.preemption_resume
    python -m bench.preemption_resume --seeds 5 --iterations 30 --at 15

For each seed, PPO on CartPole-v1 with tuned_examples/ppo_cartpole.yaml's settings (sampling
in the driver: no Ray), its ``seed`` set and ``--stop '{"training_iteration": N}'``, results in a
temporary folder, each run a fresh ``rltrainer train`` process:

1. undisturbed to N iterations, twice (the control: are two runs with one seed identical?);
2. a third time, with a SIGTERM to that process (not its group) once progress.json says iteration
   ``--at`` (k) is done; it must exit with status 75, its last line starting ``preempted (``;
3. the same command with ``--resume``, to N iterations.

Per seed: k, the checkpoint's iteration (progress.json's ``preempted`` record), the iterations
lost (done before the exit, in result.json, but not in the checkpoint: the in-flight iteration
is finished and saved, so 0), whether the resumed trial's result.json holds every iteration
1..N exactly once, the seconds from the SIGTERM to the written checkpoint, both runs' final
``episode_return_mean`` and their difference, whether the two undisturbed runs are identical
(every figure of every iteration but timings), whether the preempted run is identical to the
undisturbed one up to its checkpoint, and the first iteration at which the resumed trial differs.

The seeds start at 100 (``--first-seed``): the tuned example's settings were chosen and checked
on seeds 0-29, and their undisturbed runs look luckier than any fork of them (on seeds 0-19, a
run whose random generators alone were re-seeded at iteration 16 ended lower in 16 of 20; on
seeds 100-119 in 7 of 20): that would count as a cost of the preemption.

A checkpoint holds the weights, Adam's moments, the observation filter, the counters and the
smoothing window of episode returns; it does not hold the random generators (numpy's, torch's,
the policy's action sampling, the envs') nor the envs' unfinished episodes. A resumed process
seeds them again from ``seed`` as a fresh one does, so the resumed run samples other actions
and episodes than the undisturbed one from the checkpoint on: the same seed gives the same
run up to the checkpoint, another one after it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import TUNED_EXAMPLES, median, print_json_line
from rltrainer.preemption import EXIT_PREEMPTED, PREEMPTED_LINE_PREFIX
from rltrainer.results import flatten

TUNED = TUNED_EXAMPLES / "ppo_cartpole.yaml"
#: Result keys that differ between identical runs: wall-clock times, rates, dates, hosts.
TIMINGS = re.compile(r"^(timers|perf)/|^time_|_per_s$|^(timestamp|date|hostname|node_ip|pid)$")


def train_command(seed: int, iterations: int, storage: Path, name: str) -> list[str]:
    return [
        *[sys.executable, "-m", "rltrainer", "train", "file", str(TUNED)],
        *["--config", json.dumps({"seed": seed}), "--stop", json.dumps({"training_iteration": iterations})],
        *["--storage-path", str(storage), "--name", name],
    ]


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file being rewritten by another process: ``None`` while it is missing or cut short."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def result_rows(trial: Path) -> list[dict[str, Any]]:
    lines = (trial / "result.json").read_text().splitlines()
    return [flatten(json.loads(line)) for line in lines if line.strip()]


def figures(row: dict[str, Any]) -> dict[str, Any]:
    """A result row without its timings: what two runs with the same seed should share."""
    return {
        key: value
        for key, value in row.items()
        if isinstance(value, int | float | list) and not TIMINGS.search(key)
    }


def first_difference(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]], first: int, last: int
) -> int | None:
    """The first iteration in ``first..last`` whose figures differ between two runs, else None."""
    by_iteration = {row["training_iteration"]: figures(row) for row in theirs}
    for row in ours:
        iteration = row["training_iteration"]
        if first <= iteration <= last and figures(row) != by_iteration.get(iteration):
            return iteration
    return None


def run_to_end(command: list[str], experiment: Path) -> tuple[float, list[dict[str, Any]]]:
    """Run ``command`` (exit 0 expected); its seconds and its trial's result rows."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"{' '.join(command)} exited with {done.returncode}")
    progress = read_json(experiment / "progress.json") or {}
    return seconds, result_rows(Path(progress["trial"]))


def preempt(command: list[str], experiment: Path, at: int, log: Path) -> dict[str, Any]:
    """Start ``command``, SIGTERM it once iteration ``at`` is done, wait for its exit. The
    iteration done when the SIGTERM went may be later than ``at`` on a busy machine."""
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            while (done := (read_json(experiment / "progress.json") or {}).get("iteration") or 0) < at:
                if process.poll() is not None:
                    raise SystemExit(
                        f"the run ended (exit {process.returncode}) before iteration {at}: see {log}"
                    )
                time.sleep(0.005)
            os.kill(process.pid, signal.SIGTERM)  # the driver only, as the kubelet's TERM reaches it
            sent_at = time.time()
            status = process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    progress = read_json(experiment / "progress.json") or {}
    return {
        "done_at_sigterm": done,
        "status": status,
        "last_line": lines[-1] if lines else "",
        "sent_at": sent_at,
        "seconds": time.perf_counter() - started,
        "preempted": progress.get("preempted") or {},
        "trial": Path(progress["trial"]),
    }


def one_seed(seed: int, iterations: int, at: int, folder: Path) -> dict[str, Any]:
    undisturbed_s, undisturbed = run_to_end(
        train_command(seed, iterations, folder, "undisturbed"), folder / "undisturbed"
    )
    _, again = run_to_end(train_command(seed, iterations, folder, "again"), folder / "again")
    command = train_command(seed, iterations, folder, "preempted")
    stopped = preempt(command, folder / "preempted", at, folder / "preempted.log")
    said = stopped["preempted"]
    checkpoint_iteration = said.get("iteration")
    before_resume = result_rows(stopped["trial"])
    done_before_exit = max(row["training_iteration"] for row in before_resume)
    resumed_s, resumed = run_to_end([*command, "--resume"], folder / "preempted")
    listed = sorted(row["training_iteration"] for row in resumed)
    written_at = said.get("checkpoint_written_at")
    final_undisturbed = undisturbed[-1]["episode_return_mean"]
    final_resumed = resumed[-1]["episode_return_mean"]
    end = checkpoint_iteration or 0
    return {
        "seed": seed,
        "k": stopped["done_at_sigterm"],
        "exit_status": stopped["status"],
        "last_line_preempted": stopped["last_line"].startswith(PREEMPTED_LINE_PREFIX),
        "checkpoint_iteration": checkpoint_iteration,
        "iterations_lost": done_before_exit - end,
        "iterations_once": listed == list(range(1, iterations + 1)),
        "sigterm_to_checkpoint_s": None if written_at is None else round(written_at - stopped["sent_at"], 3),
        "library_seconds_to_checkpoint": said.get("seconds_to_checkpoint"),
        "return_undisturbed": round(final_undisturbed, 2),
        "return_resumed": round(final_resumed, 2),
        "return_difference": round(final_resumed - final_undisturbed, 2),
        "repeat_identical": first_difference(again, undisturbed, 1, iterations) is None,
        "identical_to_checkpoint": first_difference(before_resume, undisturbed, 1, end) is None,
        "first_different_iteration": first_difference(resumed, undisturbed, 1, iterations),
        "undisturbed_s": round(undisturbed_s, 1),
        "preempted_and_resumed_s": round(stopped["seconds"] + resumed_s, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=100,
        help="seeds are first-seed, first-seed + 1, ... (default 100: not among the tuned example's seeds)",
    )
    parser.add_argument("--iterations", type=int, default=30, help="N: each run's training_iteration stop")
    parser.add_argument("--at", type=int, default=15, help="k: the SIGTERM once iteration k is done")
    args = parser.parse_args(argv)
    if not 1 <= args.at < args.iterations - 1:
        parser.error("--at must leave iterations to run after the SIGTERM: 1 <= k < N - 1")
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        with tempfile.TemporaryDirectory(prefix="bench_preemption_") as folder:
            run = one_seed(seed, args.iterations, args.at, Path(folder))
        runs.append(run)
        ok = run["exit_status"] == EXIT_PREEMPTED and run["last_line_preempted"]
        print(
            f"  seed {seed}: SIGTERM after iteration {run['k']}, exit {run['exit_status']}"
            f"{'' if ok else ' (NOT a preemption)'}, checkpoint of iteration {run['checkpoint_iteration']} "
            f"{run['sigterm_to_checkpoint_s']} s after it, {run['iterations_lost']} lost, "
            f"iterations 1..{args.iterations} once: {run['iterations_once']}; return "
            f"{run['return_undisturbed']:.1f} undisturbed, {run['return_resumed']:.1f} resumed "
            f"({run['return_difference']:+.1f}); undisturbed twice identical: {run['repeat_identical']}, "
            f"identical to the checkpoint: {run['identical_to_checkpoint']}, "
            f"first different: {run['first_different_iteration']}",
            flush=True,
        )
    differences = [run["return_difference"] for run in runs]
    undisturbed = [run["return_undisturbed"] for run in runs]
    print(
        f"final return, resumed - undisturbed: median {median(differences):+.1f}, median size "
        f"{median([abs(d) for d in differences]):.1f}; undisturbed runs across seeds: "
        f"{min(undisturbed):.1f}-{max(undisturbed):.1f}"
    )
    print_json_line(
        {
            "bench": "preemption_resume",
            "config": "tuned_examples/ppo_cartpole.yaml",
            "iterations": args.iterations,
            "runs": runs,
        }
    )


if __name__ == "__main__":
    main()
