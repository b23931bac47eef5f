"""The benchmarks' shared JSON line names the machine its figures came from."""

from __future__ import annotations

import json
import os
import sys

import pytest

from bench.common import (
    ISA_CAPS,
    VECTOR_ISAS,
    above_avx2,
    capped_env,
    kernels_in,
    machine,
    print_json_line,
    run_seed,
)


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


def test_cpu_caps_reach_every_seeds_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bench.time_to_solve --cpu-caps avx2`` sets the caps in each seed's environment (and
    nowhere else) and records them in its JSON line; without it the seeds inherit ours."""
    import bench.time_to_solve as time_to_solve

    envs: list[dict[str, str] | None] = []

    def fake_run_seed(_command: list[str], _seed: int, env: dict[str, str] | None = None) -> dict:
        envs.append(env)
        return {"seconds": 1.0, "steps": 100, "solved": True}

    monkeypatch.setattr(time_to_solve, "run_seed", fake_run_seed)
    monkeypatch.setattr(time_to_solve, "kernels_in", lambda _env: {"torch": "AVX2", "numpy": "X86_V3"})
    for cap in ISA_CAPS:
        monkeypatch.delenv(cap, raising=False)
    time_to_solve.main(["--algo", "TD3", "--env", "Pendulum-v1", "--seeds", "2", "--cpu-caps", "avx2"])
    expected = {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "NUMBA_CPU_NAME": "haswell",
    }
    assert len(envs) == 2
    for env in envs:
        assert env is not None and {cap: env[cap] for cap in expected} == expected
        assert "+avx2" in env["NUMBA_CPU_FEATURES"] and "avx512" not in env["NUMBA_CPU_FEATURES"]
        assert env["PATH"] == os.environ["PATH"]  # the rest of the environment is inherited
    assert all(cap not in os.environ for cap in ISA_CAPS)  # this process stays uncapped
    figures = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert figures["cpu_caps"].items() >= expected.items() and figures["solved"] == 2
    assert figures["kernels"]["torch"] == "AVX2"

    envs.clear()
    time_to_solve.main(["--algo", "TD3", "--env", "Pendulum-v1", "--seeds", "1"])
    assert envs == [None]
    assert "cpu_caps" not in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_the_caps_take_effect_in_a_child_process() -> None:
    """With the caps, a child process's torch, numpy, OpenBLAS and numba compute with AVX2 at
    most (what ``bench.time_to_solve --cpu-caps avx2`` checks before its seeds)."""
    capped = kernels_in(capped_env("avx2")[0])
    assert above_avx2(capped) == [], capped
    assert capped["torch"] == "AVX2" and capped["numpy"] == "X86_V3"
    assert capped.get("openblas", "Haswell") == "Haswell"


def test_run_seed_hands_the_environment_to_the_child() -> None:
    """The environment ``run_seed`` is given is the child process's own (a real child)."""
    child_env, _ = capped_env("avx2")
    script = (
        "import json, os, time; print(json.dumps({'stopped_at': time.time(), 'steps': 1, 'solved': True,"
        " 'train_return': 0.0, 'eval_return': float(os.environ['ATEN_CPU_CAPABILITY'] == 'avx2')}))"
    )
    run = run_seed([sys.executable, "-c", script], seed=0, env=child_env)
    assert run["eval_return"] == 1.0


@pytest.mark.parametrize(
    ("episodes", "mean", "met"),
    [(3, 500.0, False), (19, 500.0, False), (20, 475.0, True), (120, 474.9, False)],
)
def test_the_stop_criterion_needs_a_full_window_of_episodes(episodes: int, mean: float, met: bool) -> None:
    """BENCHMARKS.md's criterion is the mean of the last 20 completed episodes: a few lucky
    episodes (ES's and ARS's unperturbed ones after an iteration or two) do not stop a run."""
    from bench.solve_one import met_target

    assert met_target({"episodes_total": episodes, "episode_return_mean": mean}, 475.0) is met


@pytest.mark.parametrize(
    ("stop", "target", "expected"),
    [
        (None, 475.0, 475.0),
        (475, 475.0, 475.0),
        (490, 475.0, 490.0),
        (450, 475.0, 475.0),
        (-180, -200.0, -180.0),
    ],
)
def test_training_stops_at_the_tuned_examples_stricter_stop(
    stop: float | None, target: float, expected: float
) -> None:
    """A tuned example may train past the benchmark's target (its ``stop.episode_return_mean``)
    for a margin in the final greedy evaluation, which is judged against the target; a looser
    stop never lowers the target."""
    from bench.time_to_solve import train_target

    spec = {"stop": {"episode_return_mean": stop}} if stop is not None else {}
    assert train_target(spec, target) == expected


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ({"episode_return_mean": 475}, None),
        ({"evaluation/episode_return_mean": 475, "timesteps_total": 300_000}, 475.0),
        ({"evaluation/env_runners/episode_reward_mean": -200}, -200.0),
    ],
)
def test_a_tuned_example_may_stop_on_its_evaluations(stop: dict, expected: float | None) -> None:
    """A tuned example that stops on its greedy evaluations (RLlib's spellings too) makes a seed
    stop only at an iteration whose evaluation reached that, besides BENCHMARKS.md's training mean."""
    from bench.solve_one import met_evaluation
    from bench.time_to_solve import evaluation_stop

    assert evaluation_stop({"stop": stop}) == expected
    assert met_evaluation({"episode_return_mean": 500.0}, expected) is (expected is None)
    assert met_evaluation({"evaluation": {"episode_return_mean": 474.0}}, 475.0) is False
    assert met_evaluation({"evaluation": {"episode_return_mean": 475.0}}, 475.0) is True


def test_a_stop_on_evaluations_needs_an_evaluation_interval() -> None:
    from bench.time_to_solve import main

    with pytest.raises(SystemExit, match="needs evaluation_interval"):
        main(["--algo", "DQN", "--env", "CartPole-v1", "--config", '{"evaluation_interval": null}'])
