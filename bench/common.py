"""Helpers shared by the benchmarks: tuned-example lookup, seeds in fresh processes, results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
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


#: CPU features that decide how fast torch's CPU kernels run, best first (oneDNN picks its
#: convolutions by them: Pong's learner is ~2x faster with AVX-512 than with AVX2 alone).
VECTOR_ISAS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "avx")


#: Environment variables capping the vector instructions: all of them set to AVX2 make an
#: AVX-512 machine compute as an AVX2-only one would (most cloud CPUs): torch's matrix products
#: (MKL), convolutions (oneDNN) and own kernels (ATen); numpy's and SciPy's BLAS (OpenBLAS,
#: which the numpy policies of the env runners use: TD3's actor, ES's and ARS's policies), numpy's
#: own kernels (ufuncs dispatched by CPU feature), and numba's code (``rltrainer.core.compiled``).
ISA_CAPS = (
    "ONEDNN_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "OPENBLAS_CORETYPE",
    "NPY_DISABLE_CPU_FEATURES",
    "NUMBA_CPU_NAME",
    "NUMBA_CPU_FEATURES",
)

#: Each cap's value per ``--cpu-caps`` choice, as each library spells it. numpy 2's dispatch
#: targets above AVX2 are X86_V4, AVX512_ICL and AVX512_SPR (``__cpu_dispatch__``); numba takes
#: the host's features unless NUMBA_CPU_FEATURES names some, so it is set too.
CAP_VALUES = {
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "NUMBA_CPU_NAME": "haswell",
        "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fxsr,+lzcnt,"
        "+mmx,+movbe,+pclmul,+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave",
    }
}


def capped_env(caps: str | None) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The environment for a benchmark's child processes with ``caps`` (a key of ``CAP_VALUES``)
    on the vector instructions, and the variables it set; ``(None, None)`` for no caps (the
    children inherit this process's environment as it is)."""
    if caps is None:
        return None, None
    variables = CAP_VALUES[caps]
    return {**os.environ, **variables}, dict(variables)


#: Run in a child process: the instruction sets its libraries' kernels then use.
_KERNELS_SCRIPT = """
import ctypes, glob, json, os
import numpy, torch
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
found = {"torch": torch.backends.cpu.get_cpu_capability(),
         "numpy": [t for t in __cpu_dispatch__ if __cpu_features__.get(t)][-1:] or ["baseline"]}
for lib in glob.glob(os.path.dirname(numpy.__file__) + ".libs/*openblas*"):
    for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
        corename = getattr(ctypes.CDLL(lib), name, None)
        if corename is not None:
            corename.restype = ctypes.c_char_p
            found["openblas"] = corename().decode()
            break
try:
    from numba.core import config
    import llvmlite.binding as llvm
    features = config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    found["numba"] = (config.CPU_NAME or llvm.get_host_cpu_name()) + (
        " avx512f" if "+avx512f" in features else "")
except ImportError:
    pass
found["numpy"] = found["numpy"][0]
print(json.dumps(found))
"""


def kernels_in(env: dict[str, str] | None) -> dict[str, str]:
    """The instruction sets torch (ATen's dispatch), numpy (its highest enabled dispatch
    target), OpenBLAS (its core type) and numba (its target CPU) pick in a child process with
    ``env``: what a benchmark's seeds compute with, checked rather than assumed."""
    done = subprocess.run(
        [sys.executable, "-c", _KERNELS_SCRIPT], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(done.stdout.splitlines()[-1])


def above_avx2(kernels: dict[str, str]) -> list[str]:
    """The libraries in ``kernels_in``'s answer that use instructions beyond AVX2."""
    beyond = {
        "torch": kernels["torch"] not in ("AVX2", "DEFAULT"),
        "numpy": kernels["numpy"] in ("X86_V4", "AVX512_ICL", "AVX512_SPR"),
        "openblas": kernels.get("openblas", "Haswell") not in ("Haswell", "Zen", "Sandybridge", "Prescott"),
        "numba": "avx512f" in kernels.get("numba", ""),
    }
    return [library for library, above in beyond.items() if above]


def machine() -> dict[str, Any]:
    """What a figure was measured on: the CPU's model, its cores and best vector instructions
    (Linux's /proc/cpuinfo), and the caps set on the vector instructions libraries use:
    ``ONEDNN_MAX_CPU_ISA`` (oneDNN's convolutions), ``ATEN_CPU_CAPABILITY`` (torch's own
    kernels), ``MKL_ENABLE_INSTRUCTIONS`` (MKL's matrix products)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    best = next((isa for isa in VECTOR_ISAS if isa in flags), None)
    found = {"cpu": model, "cores": os.cpu_count(), "isa": best}
    for cap in ISA_CAPS:
        if os.environ.get(cap):
            found[cap.lower()] = os.environ[cap]
    return found


def print_json_line(figures: dict[str, Any]) -> None:
    """The last line of every benchmark: its figures as one JSON object, with the ``machine``."""
    print(json.dumps({**figures, "machine": machine()}, sort_keys=True))


def run_seed(command: list[str], seed: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One time-to-solve seed in a fresh process (imports count in its time).

    The process prints, as its last JSON line, ``stopped_at`` (``time.time()`` when the stop
    criterion was met), ``steps``, ``solved``, ``train_return`` and ``eval_return``, optionally
    ``cpu_s`` (its CPU seconds by then); the returned run has ``seconds`` from its start
    instead of ``stopped_at``.
    """
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(done.stdout[-5000:], done.stderr[-5000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"seed {seed} crashed (exit {done.returncode})")
    run = json.loads(lines[-1])
    run["seconds"] = run.pop("stopped_at") - started
    cpu = f" ({run['cpu_s']:.2f} s CPU)" if "cpu_s" in run else ""
    print(
        f"  seed {seed}: {'solved' if run['solved'] else 'FAILED'} in {run['seconds']:.2f} s{cpu}, "
        f"{run['steps']} steps (train {run['train_return']:.1f}, eval {run['eval_return']:.1f})",
        flush=True,
    )
    return run


def summarize_seeds(runs: list[dict[str, Any]], **labels: Any) -> None:
    """Print the median line, then the figures (with ``labels``) as the last JSON line."""
    solved = sum(bool(run["solved"]) for run in runs)
    figures = {
        **labels,
        "seeds": len(runs),
        "solved": solved,
        "median_s": median([run["seconds"] for run in runs]),
        "median_steps": median([run["steps"] for run in runs]),
        "seconds": [round(run["seconds"], 2) for run in runs],
        **(
            {"cpu_seconds": [round(run["cpu_s"], 2) for run in runs]}
            if all("cpu_s" in run for run in runs)
            else {}
        ),
        "steps": [run["steps"] for run in runs],
    }
    median_s, median_steps = figures["median_s"], figures["median_steps"]
    print(f"median {median_s:.2f} s, {median_steps:.0f} steps, {solved}/{len(runs)} seeds solved")
    print_json_line(figures)
