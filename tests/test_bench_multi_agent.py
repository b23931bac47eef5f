"""bench.multi_agent's own plumbing (arguments, setups, policy mapping, the figures), without
sampling anything: the benchmark itself runs by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import multi_agent
from bench.multi_agent import Setup, parse_args, policy_setup, setups_from, summarize


def test_defaults_cover_every_setup():
    args = parse_args([])
    assert (args.lib, args.fragment, args.samples, args.repeats) == ("both", 200, 2, 3)
    setups = setups_from(args)
    assert len(setups) == 16
    assert {(s.mode, s.agents, s.policies, s.envs) for s in setups} == {
        (mode, agents, policies, envs)
        for mode in ("sample", "train")
        for agents in (2, 8)
        for policies in ("shared", "per-agent")
        for envs in (1, 8)
    }
    argv = ["--agents", "3", "--policies", "shared", "--envs", "4", "--modes", "sample"]
    assert setups_from(parse_args(argv)) == [Setup(3, "shared", 4, 200)]
    (train,) = setups_from(parse_args([*argv[:-1], "train"]))
    assert train == Setup(3, "shared", 4, 200, "train") and train.key == "3agents-shared-4envs-train"


@pytest.mark.parametrize(
    "argv", [["--policies", "mixed"], ["--samples", "0"], ["--lib", "sb3"], ["--modes", "learn"]]
)
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_policy_mapping_takes_both_call_styles():
    ids, mapping = policy_setup(Setup(3, "per-agent", 1, 200))
    assert ids == {"p0", "p1", "p2"}
    assert mapping(2, None) == "p2"  # RLlib's new stack: fn(agent_id, episode)
    assert mapping(1, episode=None, worker=None, extra=1) == "p1"
    ids, mapping = policy_setup(Setup(3, "shared", 1, 200))
    assert ids == {"shared"} and mapping(0, None, None) == "shared"


def test_summary_has_medians_and_the_paired_ratio():
    runs = {
        "rltrainer": [{"agent_steps": 100 * n, "env_steps": 50 * n, "seconds": 1.0} for n in (1, 2, 3)],
        "rllib": [{"agent_steps": 50, "env_steps": 25, "seconds": 1.0} for _ in range(3)],
    }
    row = summarize(Setup(2, "shared", 1, 200), runs)
    assert row["rltrainer_agent_steps_per_s"] == 200 and row["rllib_agent_steps_per_s"] == 50
    assert row["ratio"] == 4.0
    assert row["rltrainer_agent_steps_per_env_step"] == 2.0


def test_importing_the_bench_imports_neither_library():
    """The RLlib side runs it in RLlib's virtualenv, where rltrainer must not be imported."""
    code = "import sys, bench.multi_agent; print(sorted({'rltrainer', 'ray', 'torch'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=multi_agent.REPO
    )
    assert done.stdout.strip() == "[]"
