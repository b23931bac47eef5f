"""The benchmarks' shared JSON line names the machine its figures came from."""

from __future__ import annotations

import json

import pytest

from bench.common import VECTOR_ISAS, machine, print_json_line


def test_json_line_names_the_machine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    print_json_line({"frames_per_s": 1})
    figures = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert figures["frames_per_s"] == 1
    found = figures["machine"]
    assert found["cores"] >= 1 and found["cpu"]
    assert found["isa"] in (*VECTOR_ISAS, None)
    assert "onednn_max_cpu_isa" not in found


def test_a_capped_onednn_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert machine()["onednn_max_cpu_isa"] == "AVX2"


@pytest.mark.parametrize(
    ("algo", "env", "budget"),
    [("ES", "CartPole-v1", 3_000_000), ("ARS", "CartPole-v1", 3_000_000), ("PPO", "CartPole-v1", 300_000)],
)
def test_each_tuned_example_carries_its_time_to_solve_budget(algo: str, env: str, budget: int) -> None:
    from bench.common import find_tuned_example
    from bench.time_to_solve import tuned_budget

    _, spec = find_tuned_example(algo, env)
    assert tuned_budget(spec, env) == budget
