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
