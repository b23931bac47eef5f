"""Preemption: a pod's preStop hook, or a SIGTERM, gets a checkpoint from the running driver.

The hook talks to the driver through the GCS of the process's local Ray cluster (``local_ray``,
token authentication on, as a local ``ray.init()`` has it); the driver is ``run_experiment`` in
this process, asked from its reporter once an iteration is done and then held until the
request is in the GCS, so the run stops after a known iteration. ``rltrainer train`` gets its
SIGTERM as a subprocess. No timing is asserted beyond generous deadlines.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rltrainer.experiment import PREEMPTED, PROGRESS_FILE, run_experiment
from rltrainer.preemption import (
    DRIVER_PREFIX,
    EXIT_PREEMPTED,
    PREEMPTED_LINE_PREFIX,
    REQUEST_PREFIX,
    RESULT_PREFIX,
    GcsKeys,
    main,
    preempted_line,
    request_checkpoint,
)
from rltrainer.storage import StorageError
from tests.fresh_python import python_output

REPO = Path(__file__).resolve().parents[1]
TINY = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}
DEADLINE_S = 60


def tiny_config(storage: Path) -> Any:
    from rltrainer.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(**TINY, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(storage), experiment_name="exp")
        .debugging(seed=0)
    )


def gcs_address() -> str:
    import ray

    return ray.get_runtime_context().gcs_address


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hook_command(*args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rltrainer.preemption", "hook", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


def rltrainer_train(
    storage: Path, num_env_runners: int, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``rltrainer train`` of the tiny config until stopped, its stderr in its stdout (as a Ray job's log)."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "rltrainer", "train", "--algo", "PPO", "--env", "CartPole-v1",
            "--storage-path", str(storage), "--name", "exp", "--stop", '{"training_iteration": 1000000}',
            "--config", json.dumps({**TINY, "num_env_runners": num_env_runners}),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )  # fmt: skip


class AskAfter:
    """A reporter that starts a hook (``ask()``) after iteration ``n``, then holds the driver
    until the hook's request is in the GCS."""

    def __init__(self, n: int, ask: Any) -> None:
        self.n, self.ask = n, ask
        self.gcs = GcsKeys.connect(gcs_address(), 10)

    def on_start(self, trial_dir: Path) -> None:
        self.trial_dir = Path(trial_dir)

    def on_result(self, result: dict[str, Any]) -> None:
        if result["training_iteration"] != self.n:
            return
        self.ask()
        deadline = time.monotonic() + DEADLINE_S
        while not self.gcs.keys(REQUEST_PREFIX) and time.monotonic() < deadline:
            time.sleep(0.05)


def in_thread(function: Any) -> tuple[threading.Thread, list[Any]]:
    """``function()`` in a thread; its return value and the time it returned, in the list."""
    returned: list[Any] = []
    thread = threading.Thread(target=lambda: returned.extend([function(), time.time()]), daemon=True)
    return thread, returned


def result_iterations(trial_dir: Path) -> list[int]:
    lines = (trial_dir / "result.json").read_text().splitlines()
    return [json.loads(line)["training_iteration"] for line in lines]


@pytest.mark.usefixtures("local_ray")
def test_hook_gets_a_checkpoint_and_resume_continues_after_it(tmp_path: Path) -> None:
    config = tiny_config(tmp_path)
    hook, returned = in_thread(
        lambda: request_checkpoint(gcs_address(), timeout_s=DEADLINE_S, reason="drain")
    )
    reporter = AskAfter(2, hook.start)
    handler = signal.getsignal(signal.SIGTERM)
    result = run_experiment(config.copy(), {"training_iteration": 100}, reporter=reporter)
    hook.join(DEADLINE_S)
    assert signal.getsignal(signal.SIGTERM) == handler  # the watch's own is gone again

    assert result.stopped_by == PREEMPTED and result.iterations == 2
    checkpoint = reporter.trial_dir / "checkpoint_000002"
    assert result.checkpoint_path == str(checkpoint)
    assert (checkpoint / "rltrainer_checkpoint.json").is_file()
    outcome, returned_at = returned
    assert outcome.status == "checkpointed", outcome.line
    assert outcome.checkpoint == str(checkpoint) and str(checkpoint) in outcome.line
    preempted = result.preempted
    assert returned_at >= preempted["checkpoint_written_at"]  # the hook waited for the checkpoint
    assert preempted["reason"] == "drain" and preempted["iteration"] == 2 and preempted["error"] is None
    assert preempted["requested_at"] <= preempted["checkpoint_written_at"]
    progress = json.loads((tmp_path / "exp" / PROGRESS_FILE).read_text())
    assert progress["stopped_by"] == PREEMPTED and progress["finished"] is False
    assert progress["last_checkpoint"] == str(checkpoint) and progress["preempted"] == preempted
    assert progress["seconds_per_iteration"] > 0 and progress["seconds_per_checkpoint"] is not None
    # The driver left the GCS; its answer stays for hooks still reading it.
    assert not reporter.gcs.keys(DRIVER_PREFIX) and not reporter.gcs.keys(REQUEST_PREFIX)
    assert reporter.gcs.keys(RESULT_PREFIX)

    again = run_experiment(config.copy(), {"training_iteration": 4}, resume=True)
    assert again.resumed_from == str(checkpoint) and again.last_result["training_iteration"] == 4
    assert result_iterations(reporter.trial_dir) == [1, 2, 3, 4]  # none repeated, none lost


@pytest.mark.usefixtures("local_ray")
def test_hook_command_waits_for_the_driver_with_the_clusters_token(tmp_path: Path) -> None:
    hooks: list[subprocess.Popen] = []
    reporter = AskAfter(
        1, lambda: hooks.append(hook_command("--address", gcs_address(), "--reason", "evicted"))
    )
    try:
        result = run_experiment(tiny_config(tmp_path), {"training_iteration": 100}, reporter=reporter)
        out, err = hooks[0].communicate(timeout=DEADLINE_S)
    finally:
        for hook in hooks:
            hook.kill()
    assert result.stopped_by == PREEMPTED and result.preempted["reason"] == "evicted"
    assert hooks[0].returncode == 0, err
    (line,) = out.splitlines()
    assert line.startswith(
        f"rltrainer preemption hook: checkpoint {result.checkpoint_path} written at iteration 1"
    )


@pytest.mark.usefixtures("local_ray")
def test_a_failed_checkpoint_is_said_to_the_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(tmp_path)

    def full_disk(*_: Any) -> str:
        raise StorageError("no space left on device")

    monkeypatch.setattr(config.algo_class, "save", full_disk)
    hook, returned = in_thread(lambda: request_checkpoint(gcs_address(), timeout_s=DEADLINE_S))
    result = run_experiment(config, {"training_iteration": 100}, reporter=AskAfter(1, hook.start))
    hook.join(DEADLINE_S)
    assert result.stopped_by == PREEMPTED and result.checkpoint_path is None
    assert result.preempted["error"] == "no space left on device"
    outcome, _ = returned
    assert outcome.status == "failed" and "no space left on device" in outcome.line
    line = preempted_line("preStop", None, 1, result.preempted["error"])
    assert line.startswith(PREEMPTED_LINE_PREFIX + "preStop): the checkpoint after 1 iteration(s) failed")


@pytest.mark.usefixtures("local_ray")
def test_hook_returns_at_once_without_a_driver_and_forgets_a_dead_ones_key() -> None:
    gcs = GcsKeys.connect(gcs_address(), 10)
    gcs.put(DRIVER_PREFIX + "killed", {"job_id": "7f000000", "pid": 1})  # a job that never ran
    outcome = request_checkpoint(gcs_address(), timeout_s=DEADLINE_S)
    assert outcome.status == "no-driver", outcome.line
    assert outcome.waited_s < DEADLINE_S / 2
    assert gcs.get(DRIVER_PREFIX + "killed") is None


def test_hook_command_without_a_gcs_exits_0_at_once() -> None:
    start = time.monotonic()
    hook = hook_command("--address", f"127.0.0.1:{closed_port()}", "--timeout", str(DEADLINE_S))
    out, err = hook.communicate(timeout=DEADLINE_S)
    assert hook.returncode == 0, err
    assert out.startswith("rltrainer preemption hook: no Ray GCS answers at 127.0.0.1:")
    assert time.monotonic() - start < DEADLINE_S / 2
    assert main(["hook", "--no-such-flag"]) == 0  # a preStop hook never fails


def test_the_hook_imports_neither_torch_nor_ray_when_no_gcs_answers() -> None:
    out = python_output(
        "import sys\n"
        "from rltrainer.preemption import main\n"
        f"main(['hook', '--address', '127.0.0.1:{closed_port()}'])\n"
        "print(sorted(m for m in ('torch', 'ray', 'gymnasium') if m in sys.modules))\n"
    )
    assert out.splitlines()[-1] == "[]"


@pytest.mark.usefixtures("local_ray")
def test_hook_with_a_wrong_token_is_refused_and_exits_0(tmp_path: Path) -> None:
    if os.environ.get("RAY_AUTH_MODE") != "token":
        pytest.skip("the local cluster runs without token authentication")
    env = {**os.environ, "RAY_AUTH_TOKEN": "not-the-clusters-token", "HOME": str(tmp_path)}
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    hook = hook_command("--address", gcs_address(), env=env)
    out, err = hook.communicate(timeout=DEADLINE_S)
    assert hook.returncode == 0, err
    assert out.startswith(f"rltrainer preemption hook: the Ray GCS at {gcs_address()} refused us:")


@pytest.mark.parametrize("on_ray", [False, True], ids=["alone", "on-ray"])
def test_sigterm_to_rltrainer_train_checkpoints_and_exits_75(
    on_ray: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Alone (no Ray), or connected to a cluster through ``RAY_ADDRESS`` with an env runner actor
    (``ray.init()`` installs Ray's own SIGTERM handler, which the driver's replaces while it trains)."""
    env = None
    if on_ray:
        request.getfixturevalue("local_ray")
        env = {**os.environ, "RAY_ADDRESS": gcs_address()}
    train = rltrainer_train(tmp_path, num_env_runners=int(on_ray), env=env)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not list(tmp_path.glob("exp/*/result.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        train.send_signal(signal.SIGTERM)
        out, _ = train.communicate(timeout=DEADLINE_S)
    finally:
        train.kill()
    assert train.returncode == EXIT_PREEMPTED, out
    progress = json.loads((tmp_path / "exp" / PROGRESS_FILE).read_text())
    checkpoint = progress["last_checkpoint"]
    assert Path(checkpoint, "rltrainer_checkpoint.json").is_file()
    assert progress["preempted"]["reason"] == "SIGTERM" and progress["preempted"]["checkpoint"] == checkpoint
    iterations = progress["preempted"]["iteration"]
    assert out.splitlines()[-1] == preempted_line("SIGTERM", checkpoint, iterations)
    assert out.splitlines()[-1].startswith(
        f"{PREEMPTED_LINE_PREFIX}SIGTERM): checkpoint {checkpoint} written"
    )


@pytest.mark.usefixtures("local_ray")
def test_hook_waits_until_a_submitted_jobs_end_is_recorded(tmp_path: Path) -> None:
    """A Ray job's driver (connected through ``RAY_ADDRESS``, with an env runner actor): the hook
    returns once the job's status says it ended (its supervisor, played here, records it when
    the driver process has exited), not when the driver disconnects; the driver's last line is
    the preempted one, after the actors' forwarded logs."""
    gcs = GcsKeys.connect(gcs_address(), 10)
    submission = f"rltrainer-test-{os.getpid()}-{time.monotonic_ns()}"
    # What the job supervisor gives the entrypoint, and the job's record it keeps in the GCS.
    job_config = {"runtime_env": {}, "metadata": {"job_submission_id": submission}}
    env = {**os.environ, "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job_config), "RAY_ADDRESS": gcs_address()}

    def record(status: str) -> None:
        info = {"status": status, "entrypoint": "rltrainer train", "start_time": 1}
        gcs.client.internal_kv_put(
            f"_ray_internal_job_info_{submission}".encode(), json.dumps(info).encode(), True, b"job", 5
        )

    record("RUNNING")
    train = rltrainer_train(tmp_path, num_env_runners=1, env=env)
    supervisor = threading.Thread(target=lambda: (train.wait(), record("FAILED")), daemon=True)
    supervisor.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (gcs.keys(DRIVER_PREFIX) and list(tmp_path.glob("exp/*/result.json"))):
            assert time.monotonic() < deadline and train.poll() is None, train.stdout.read()
            time.sleep(0.1)
        outcome = request_checkpoint(gcs_address(), timeout_s=DEADLINE_S, reason="preStop")
        exited = train.poll()
        out, _ = train.communicate(timeout=DEADLINE_S)
    finally:
        train.kill()
    assert outcome.status == "checkpointed" and "; the driver exited (waited " in outcome.line, outcome.line
    assert exited == EXIT_PREEMPTED, out
    assert out.splitlines()[-1].startswith(
        f"{PREEMPTED_LINE_PREFIX}preStop): checkpoint {outcome.checkpoint} "
    )


@pytest.mark.usefixtures("local_ray")
def test_a_workers_hook_asks_nothing_but_follows_the_heads_request(tmp_path: Path) -> None:
    """``--follow``: alone, a worker's hook goes once its window ends (the job replaces the
    worker); with the head's request in that window, it waits for the checkpoint as the head's
    hook does (the worker serves the iteration in flight)."""
    config = tiny_config(tmp_path)
    alone, alone_returned = in_thread(
        lambda: request_checkpoint(gcs_address(), timeout_s=DEADLINE_S, follow_s=0.5)
    )
    follower, followed = in_thread(
        lambda: request_checkpoint(gcs_address(), timeout_s=DEADLINE_S, follow_s=30)
    )
    head, _ = in_thread(lambda: request_checkpoint(gcs_address(), timeout_s=DEADLINE_S, reason="preempted"))

    class Reporter(AskAfter):
        def on_result(self, result: dict[str, Any]) -> None:
            if result["training_iteration"] == 1:  # a worker alone: no request, training goes on
                alone.start()
                alone.join(DEADLINE_S)
            super().on_result(result)

    reporter = Reporter(3, lambda: (follower.start(), head.start()))
    result = run_experiment(config.copy(), {"training_iteration": 100}, reporter=reporter)
    follower.join(DEADLINE_S)
    head.join(DEADLINE_S)
    assert alone_returned[0].status == "no-request", alone_returned[0].line
    assert result.stopped_by == PREEMPTED and result.iterations == 3
    outcome, returned_at = followed
    assert outcome.status == "checkpointed" and outcome.checkpoint == result.checkpoint_path, outcome.line
    assert returned_at >= result.preempted["checkpoint_written_at"]
