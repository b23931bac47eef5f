"""Multi-agent sampling throughput: agent steps per second of ONE env runner sampling in the
driver process (no remote runners, policy inference included), rltrainer against RLlib 2.60,
measured in the same run.

The env is a multi-agent CartPole: N independent CartPole-v1 copies in one multi-agent env,
agent ids 0..N-1 (rltrainer's ``make_multi_agent("CartPole-v1")``, RLlib's
``MultiAgentCartPole`` from ``ray.rllib.examples.envs.classes.multi_agent``, the same
``make_multi_agent`` recipe: an agent whose pole fell stops acting until every agent is done,
then all are reset). Setups: N = 2 and 8 agents per env, one policy shared by all agents
(``shared``) or one policy per agent (``per-agent``: ``p0`` .. ``p{N-1}``), and 1 or 8 such envs
per env runner (``num_envs_per_env_runner``). Both libraries: PPO, MLP 64x64 tanh,
``explore=True`` (actions sampled from the policy's distribution), ``rollout_fragment_length``
200 (one ``sample()`` = 200 x envs env steps), RLlib's default ``count_steps_by="env_steps"``.

    python -m bench.multi_agent                     # --lib both: rltrainer here, RLlib in a child
    python -m bench.multi_agent --lib rltrainer
    python -m bench.multi_agent --lib rllib         # re-runs itself under /tmp/anchors-venv
    /tmp/anchors-venv/bin/python -m bench.multi_agent --lib rllib
    python -m bench.multi_agent --agents 2,8 --policies shared,per-agent --envs 1,8 \\
        --modes sample,train --fragment 200 --samples 2 --repeats 3
    python -m bench.multi_agent --agents 2,8 --policies per-agent --envs 1 --modes train

``--modes train`` (in the default ``--modes sample,train``) measures the same setups while
training: each side builds its whole PPO algorithm (RLlib: ``config.build_algo()``, which starts
a local Ray instance, shut down again after the setup) and a timed unit is one ``train()``
iteration instead of one ``sample()``: one fragment (``train_batch_size`` = fragment x envs env
steps), then per trainable policy ``num_epochs=10`` passes of minibatches of ``minibatch_size=128``
rows (the tuned two-CartPole example's), then the weights back to the runner; everything else
is either library's PPO default (the same numbers: lr 5e-5, lambda 1.0, kl_coeff 0.2, clip 0.3,
vf_clip 10). Agent steps are those the iteration sampled (RLlib's
``result["env_runners"]["num_agent_steps_sampled"]`` summed over agents, rltrainer's
``result["num_agent_steps_sampled"]``). The libraries' minibatching differs in detail: rltrainer
shuffles each policy's rows into minibatches of 128 (a policy with fewer rows takes them all at
once), RLlib cycles each module's rows into minibatches of 128.

(``/tmp/anchors-venv``: RLlib 2.60's own virtualenv, made as ``bench/anchors.py`` says; this
script never imports rltrainer there, nor RLlib in the project's venv.)

Protocol (BENCHMARKS.md: medians, ratios measured in the same run). Per setup, each library
builds its runner and samples once (warm-up: envs reset, first episodes running); then R
repeats (``--repeats``, 3), each timing K consecutive ``sample()`` calls (``--samples``, 2)
with ``time.perf_counter``, the two libraries one after the other, their order alternating
from one repeat to the next. A repeat's rate is the agent steps those K samples returned
divided by their wall time; a library's figure is the median over repeats, the ratio
(rltrainer / RLlib) the median of the repeats' ratios, so the machine's drift cancels out.
Agent steps (one per agent action) are counted from what ``sample()`` returned, never from
the settings: RLlib's ``sum(episode.agent_steps())`` over the returned episode chunks,
rltrainer's ``batch.agent_steps``. The JSON line also has each side's agent steps per env step
(the same env semantics give the same figure: measured 1.5-1.6 for 2 agents and 4.0-4.5 for 8,
both libraries, with freshly initialised policies).

Threads: ``OMP_NUM_THREADS=1``/``MKL_NUM_THREADS=1`` (set before torch is imported, in both
processes) and ``torch.set_num_threads(1)`` on both sides. ``--lib both`` keeps one RLlib
child process for the whole run (``--serve``: JSON commands on stdin, replies on stdout),
which waits on its stdin while rltrainer samples, and the reverse.

RLlib side: RLlib 2.60's new API stack ``MultiAgentEnvRunner`` built straight from the
``PPOConfig`` (``MultiAgentEnvRunner(config=config)``: what ``EnvRunnerGroup`` builds as the
local env runner, worker index 0), sampled with ``runner.sample(explore=True)``. It needs no
Ray instance, so none is started (Ray's daemons would share the 2 cores).
``--rllib-build algo`` builds the whole algorithm instead (``config.build_algo()``, after
``ray.init(include_dashboard=False)``: RLlib 2.60 starts a local Ray instance for that) and
samples ``algo.env_runner_group.local_env_runner``, the same class, for a cross-check. RLlib's
env runners hold inference-only modules: sampling runs the actor MLP (4-64-64-2) only, no
value head. RLlib 2.60 vectorizes multi-agent envs (``num_envs_per_env_runner > 1``): its
``MultiAgentEnvRunner`` steps a ``SyncVectorMultiAgentEnv`` of that many copies
(``gym_env_vectorize_mode`` SYNC by default): both vector sizes are measured for RLlib too.

rltrainer side: ``PPOConfig().environment(make_multi_agent("CartPole-v1"), env_config=
{"num_agents": N}).env_runners(num_env_runners=0, ...).multi_agent(policies=...,
policy_mapping_fn=...)``, ``algo.env_runner_group.local_worker().sample(explore=True)``,
which returns ``(batch, episodes)`` with ``batch.agent_steps`` and ``batch.env_steps``
(``RltrainerSampler`` is the only code that touches rltrainer's API).

Measured on this kind of machine (2 cores, CPU only, 1 torch thread, shared with other work),
2026-11-27, ``--lib rllib`` (RLlib alone), medians of 3 x 2 samples, fragment 200, RLlib 2.60
agent steps/s:

| agents | policies  | 1 env | 8 envs |
|--------|-----------|-------|--------|
| 2      | shared    | 1,382 |  3,910 |
| 2      | per-agent | 1,275 |  4,133 |
| 8      | shared    | 2,739 |  5,271 |
| 8      | per-agent | 1,420 |  2,940 |

In a ``--lib both`` run minutes later RLlib's figures were between 12 % higher and 33 % lower
than these, setup by setup (the machine is shared: hence the same-run ratios). ``--rllib-build algo`` gave the
same figures as the default (3,015 / 4,411 against 3,187 / 4,265 for 2 / 8 agents, shared, 8
envs). The whole default run takes about 70 s (RLlib alone: about 50 s).

Prints a table, then, as its last line, one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from bench.common import median, print_json_line

REPO = Path(__file__).resolve().parent.parent
RLLIB_PYTHON = "/tmp/anchors-venv/bin/python"
HIDDENS = [64, 64]
ACTIVATION = "tanh"
REPLY = "@@bench.multi_agent "  # the RLlib child's replies on stdout start with this
POLICY_KINDS = ("shared", "per-agent")
MODES = ("sample", "train")
# PPO's settings in --modes train (both libraries; the rest are their shared PPO defaults):
# one fragment per iteration (train_batch_size = fragment x envs env steps), then per policy
# NUM_EPOCHS passes of minibatches of MINIBATCH_SIZE rows (the tuned two-CartPole example's).
MINIBATCH_SIZE, NUM_EPOCHS = 128, 10


class Setup(NamedTuple):
    agents: int
    policies: str  # "shared" or "per-agent"
    envs: int
    fragment: int
    mode: str = "sample"  # "sample": sample() calls; "train": PPO train() iterations

    @property
    def key(self) -> str:
        key = f"{self.agents}agents-{self.policies}-{self.envs}envs"
        return key if self.mode == "sample" else f"{key}-train"


def pin_threads() -> None:
    """One thread for OpenMP/MKL (read when torch is imported, so call this first)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"


def torch_one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def policy_setup(setup: Setup) -> tuple[set[str], Any]:
    """The policy ids and the ``policy_mapping_fn``, RLlib's signature: RLlib 2.60's new stack
    calls ``fn(agent_id, episode)``, the old one (and rltrainer) ``fn(agent_id, episode,
    worker, **kwargs)``."""
    if setup.policies == "shared":

        def shared(agent_id, episode=None, worker=None, **kwargs):  # noqa: ARG001
            return "shared"

        return {"shared"}, shared

    def per_agent(agent_id, episode=None, worker=None, **kwargs):  # noqa: ARG001
        return f"p{agent_id}"

    return {f"p{i}" for i in range(setup.agents)}, per_agent


# --- the samplers: one per library, each with sample_once() -> (agent steps, env steps), stop()


class RltrainerSampler:
    """rltrainer's driver env runner on the multi-agent CartPole. The only code here that
    uses rltrainer's API: fix it here if that API changes."""

    def __init__(self, setup: Setup) -> None:
        from rltrainer.algorithms.ppo import PPOConfig
        from rltrainer.env.multi_agent_env import make_multi_agent

        policies, mapping = policy_setup(setup)
        self._storage = tempfile.TemporaryDirectory()
        config = (
            PPOConfig()
            .environment(make_multi_agent("CartPole-v1"), env_config={"num_agents": setup.agents})
            .env_runners(
                num_env_runners=0,
                num_envs_per_env_runner=setup.envs,
                rollout_fragment_length=setup.fragment,
            )
            .training(
                model={"fcnet_hiddens": HIDDENS, "fcnet_activation": ACTIVATION},
                train_batch_size=setup.fragment * setup.envs,
                **(
                    {"minibatch_size": MINIBATCH_SIZE, "num_epochs": NUM_EPOCHS}
                    if setup.mode == "train"
                    else {}
                ),
            )
            .multi_agent(policies=policies, policy_mapping_fn=mapping)
            .reporting(storage_path=self._storage.name)
        )
        self.algo = config.build()
        torch_one_thread()
        self.runner = self.algo.env_runner_group.local_worker()
        self.train = setup.mode == "train"

    def sample_once(self) -> tuple[int, int]:
        if self.train:
            result = self.algo.train()
            return int(result["num_agent_steps_sampled"]), int(result["num_env_steps_sampled"])
        batch, _episodes = self.runner.sample(explore=True)
        return int(batch.agent_steps), int(batch.env_steps)

    def stop(self) -> None:
        self.algo.stop()
        self._storage.cleanup()


class RllibSampler:
    """RLlib 2.60's new-stack ``MultiAgentEnvRunner`` (see the module docstring)."""

    def __init__(self, setup: Setup, build: str = "runner") -> None:
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
        from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
        from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

        torch_one_thread()
        policies, mapping = policy_setup(setup)
        config = (
            PPOConfig()
            .environment(MultiAgentCartPole, env_config={"num_agents": setup.agents})
            .env_runners(
                num_env_runners=0,
                num_envs_per_env_runner=setup.envs,
                rollout_fragment_length=setup.fragment,
                explore=True,
            )
            # Only build_algo() validates it against the fragment: one fragment per batch.
            .training(
                train_batch_size_per_learner=setup.fragment * setup.envs,
                **(
                    {"minibatch_size": MINIBATCH_SIZE, "num_epochs": NUM_EPOCHS}
                    if setup.mode == "train"
                    else {}
                ),
            )
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=HIDDENS, fcnet_activation=ACTIVATION))
            .multi_agent(policies=policies, policy_mapping_fn=mapping)
        )
        self.algo = None
        self.train = setup.mode == "train"
        if build == "algo" or self.train:
            import ray

            if not ray.is_initialized():
                ray.init(include_dashboard=False)
            self.algo = config.build_algo()
            self.runner = self.algo.env_runner_group.local_env_runner
        else:
            self.runner = MultiAgentEnvRunner(config=config)
        torch_one_thread()

    def sample_once(self) -> tuple[int, int]:
        if self.train:
            results = self.algo.train()["env_runners"]
            agent_steps = results["num_agent_steps_sampled"]  # {agent id: steps this iteration}
            return int(sum(agent_steps.values())), int(results["num_env_steps_sampled"])
        episodes = self.runner.sample(explore=True)
        return sum(e.agent_steps() for e in episodes), sum(e.env_steps() for e in episodes)

    def stop(self) -> None:
        if self.algo is not None:
            import ray

            self.algo.stop()
            ray.shutdown()  # its daemons would share the cores with the next setups
        else:
            self.runner.stop()


def measure(sampler: Any, samples: int) -> dict[str, float]:
    """K consecutive samples, timed together."""
    agent_steps = env_steps = 0
    start = time.perf_counter()
    for _ in range(samples):
        agents, envs = sampler.sample_once()
        agent_steps += agents
        env_steps += envs
    return {"agent_steps": agent_steps, "env_steps": env_steps, "seconds": time.perf_counter() - start}


# --- the sides: a library sampling in this process or in the RLlib child


class Side(Protocol):
    name: str

    def start(self, setup: Setup) -> None: ...  # build, then one warm-up sample
    def measure(self, samples: int) -> dict[str, float]: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


class InProcess:
    def __init__(self, name: str, make: Any) -> None:
        self.name, self._make, self._sampler = name, make, None

    def start(self, setup: Setup) -> None:
        self._sampler = self._make(setup)
        self._sampler.sample_once()

    def measure(self, samples: int) -> dict[str, float]:
        return measure(self._sampler, samples)

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def close(self) -> None:
        self.stop()


class RllibChild:
    """RLlib in its own virtualenv: ``python -m bench.multi_agent --serve`` there."""

    name = "rllib"

    def __init__(self, python: str, build: str) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("VIRTUAL_ENV", None)
        self._proc = subprocess.Popen(
            [python, "-m", "bench.multi_agent", "--serve", "--rllib-build", build],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )

    def _call(self, **command: Any) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(command) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # reported below, with the child's stderr
        for line in self._proc.stdout:
            if line.startswith(REPLY):
                reply = json.loads(line[len(REPLY) :])
                if "error" in reply:
                    raise SystemExit(f"RLlib side failed on {command}:\n{reply['error']}")
                return reply
        self._stderr.seek(0)
        raise SystemExit(
            f"the RLlib process ended (exit {self._proc.wait()}):\n{self._stderr.read()[-5000:]}"
        )

    def start(self, setup: Setup) -> None:
        self._call(op="start", setup=setup._asdict())

    def measure(self, samples: int) -> dict[str, float]:
        return self._call(op="measure", samples=samples)

    def stop(self) -> None:
        self._call(op="stop")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._call(op="quit")
            self._proc.wait(timeout=60)
        self._stderr.close()


def serve(build: str) -> None:
    """The RLlib child: one JSON command a line on stdin, one reply a line on stdout."""
    side = InProcess("rllib", lambda setup: RllibSampler(setup, build))
    for line in sys.stdin:
        command = json.loads(line)
        try:
            op, reply = command["op"], {"ok": True}
            if op == "start":
                side.start(Setup(**command["setup"]))
            elif op == "measure":
                reply = side.measure(command["samples"])
            elif op == "stop":
                side.stop()
            elif op == "quit":
                side.close()
        except Exception:  # noqa: BLE001 (the parent prints it and exits)
            reply = {"error": traceback.format_exc()}
        print(REPLY + json.dumps(reply), flush=True)
        if command.get("op") == "quit":
            return


# --- the run


def summarize(setup: Setup, runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    row: dict[str, Any] = setup._asdict()
    rates = {name: [r["agent_steps"] / r["seconds"] for r in reps] for name, reps in runs.items()}
    for name, reps in runs.items():
        env_steps = sum(r["env_steps"] for r in reps)
        row[f"{name}_agent_steps_per_s"] = round(median(rates[name]))
        row[f"{name}_rates"] = [round(rate) for rate in rates[name]]
        row[f"{name}_agent_steps_per_env_step"] = (
            round(sum(r["agent_steps"] for r in reps) / env_steps, 3) if env_steps else None
        )
    if len(rates) == 2:
        pairs = zip(rates["rltrainer"], rates["rllib"], strict=True)
        row["ratio"] = round(median([ours / theirs for ours, theirs in pairs]), 3)
    return row


def run(sides: list[Side], setups: list[Setup], samples: int, repeats: int) -> dict[str, Any]:
    names = [side.name for side in sides]
    print(
        f"multi-agent CartPole-v1, PPO MLP {HIDDENS} {ACTIVATION}, explore=True, fragment "
        f"{setups[0].fragment}, 1 env runner in the driver, 1 torch thread; "
        f"medians of {repeats} x {samples} samples, agent steps/s"
    )
    header = (
        f"{'mode':>6} {'agents':>6} {'policies':>9} {'envs':>4} {'rltrainer':>10} {'RLlib':>10} {'ratio':>7}"
    )
    print(header, flush=True)
    figures: dict[str, Any] = {}
    for setup in setups:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        try:
            for side in sides:
                side.start(setup)
            for repeat in range(repeats):
                for side in sides if repeat % 2 == 0 else sides[::-1]:
                    runs[side.name].append(side.measure(samples))
        finally:
            for side in sides:
                side.stop()
        row = figures[setup.key] = summarize(setup, runs)
        ours, theirs = row.get("rltrainer_agent_steps_per_s"), row.get("rllib_agent_steps_per_s")
        print(
            f"{setup.mode:>6} {setup.agents:>6} {setup.policies:>9} {setup.envs:>4} "
            f"{'-' if ours is None else f'{ours:,}':>10} {'-' if theirs is None else f'{theirs:,}':>10} "
            f"{row.get('ratio', '-'):>7}",
            flush=True,
        )
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lib", choices=["both", "rltrainer", "rllib"], default="both")
    parser.add_argument("--agents", default="2,8", help="comma-separated agents per env")
    parser.add_argument("--policies", default="shared,per-agent", help="shared and/or per-agent")
    parser.add_argument("--envs", default="1,8", help="comma-separated num_envs_per_env_runner")
    parser.add_argument("--fragment", type=int, default=200, help="rollout_fragment_length")
    parser.add_argument(
        "--modes", default="sample,train", help="sample (sample() calls) and/or train (PPO train())"
    )
    parser.add_argument(
        "--samples", type=int, default=2, help="K: samples (train() iterations) timed per repeat"
    )
    parser.add_argument("--repeats", type=int, default=3, help="R: medians over this many repeats")
    parser.add_argument("--rllib-python", default=RLLIB_PYTHON, help="RLlib 2.60's virtualenv python")
    parser.add_argument(
        "--rllib-build",
        choices=["runner", "algo"],
        default="runner",
        help="RLlib: MultiAgentEnvRunner(config) (default) or build_algo()'s local env runner",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    bad = set(args.policies.split(",")) - set(POLICY_KINDS)
    if bad:
        parser.error(f"--policies: unknown {sorted(bad)}; choose from {POLICY_KINDS}")
    bad = set(args.modes.split(",")) - set(MODES)
    if bad:
        parser.error(f"--modes: unknown {sorted(bad)}; choose from {MODES}")
    if args.samples < 1 or args.repeats < 1 or args.fragment < 1:
        parser.error("--samples, --repeats and --fragment must be positive")
    return args


def setups_from(args: argparse.Namespace) -> list[Setup]:
    return [
        Setup(int(agents), policies, int(envs), args.fragment, mode)
        for mode, agents, policies, envs in itertools.product(
            args.modes.split(","), args.agents.split(","), args.policies.split(","), args.envs.split(",")
        )
    ]


def main(argv: list[str] | None = None) -> None:
    pin_threads()
    args = parse_args(argv)
    if args.serve:
        serve(args.rllib_build)
        return
    if args.lib == "rllib" and Path(sys.prefix).resolve() != Path(args.rllib_python).parent.parent.resolve():
        # Not RLlib's virtualenv (the project's has Ray too): run this script there instead.
        os.chdir(REPO)
        command = [args.rllib_python, "-m", "bench.multi_agent", *(sys.argv[1:] if argv is None else argv)]
        os.execv(args.rllib_python, command)
    sides: list[Side] = []
    if args.lib in ("both", "rltrainer"):
        # Fail now, not after the RLlib child started.
        import rltrainer.algorithms.ppo  # noqa: F401
        import rltrainer.env.multi_agent_env  # noqa: F401

        sides.append(InProcess("rltrainer", RltrainerSampler))
    if args.lib == "both":
        sides.append(RllibChild(args.rllib_python, args.rllib_build))
    elif args.lib == "rllib":
        sides.append(InProcess("rllib", lambda setup: RllibSampler(setup, args.rllib_build)))
    try:
        figures = run(sides, setups_from(args), args.samples, args.repeats)
    finally:
        for side in sides:
            side.close()
    print_json_line(
        {
            "bench": "multi_agent",
            "lib": args.lib,
            "fragment": args.fragment,
            "train_settings": {"minibatch_size": MINIBATCH_SIZE, "num_epochs": NUM_EPOCHS},
            "samples": args.samples,
            "repeats": args.repeats,
            "rllib_build": args.rllib_build,
            "setups": figures,
        }
    )


if __name__ == "__main__":
    main()
