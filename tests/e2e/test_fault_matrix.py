"""The fault matrix (README, "Reliability"): each fault injected the number of times the table
says, at random moments, into real processes and servers; each test counts the faults the run
survived against those it tried, and passes only when it survived them all.

- env runner SIGKILL x10 in one run (2 runners on a local Ray instance);
- training process SIGKILL x5 (the driver and the Ray instance it started, as a lost pod), each
  run again with ``--resume``, on local storage and on S3 (moto's server on 127.0.0.1): the
  results hold every iteration once, no gap, no repeat;
- S3 endpoint down in the middle of a checkpoint upload x10 (after a random number of its files);
- disk full in the middle of a checkpoint x10 (a real tmpfs filled to a random number of bytes
  short of the checkpoint's size; needs root to mount, skipped otherwise).

The learner row (SIGKILL x5, with 1 and 2 learners) is ``tests/test_learner_restarts.py``, which
``make test`` runs. The storage rows take seconds and run in ``make test`` too; the process
kills run under ``make e2e`` (about 5 minutes of its time). ``pytest -s``
prints the table at the end; ``RLTRAINER_FAULT_MATRIX_JSON=PATH`` also writes it as JSON, and
``RLTRAINER_FAULT_SEED=N`` draws other moments and amounts.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayError

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.checkpoint_store import list_checkpoints, open_checkpoint
from rltrainer.storage import S3Storage, open_storage
from tests.e2e.helpers import wait_for
from tests.test_storage_failures import fill, tmpfs  # noqa: F401 - tmpfs is a fixture

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "faults"
FAST = {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1}

#: Seeds the random moments and amounts (``RLTRAINER_FAULT_SEED``: another draw of the matrix).
SEED = int(os.environ.get("RLTRAINER_FAULT_SEED", "0"))
#: row -> (survived, tried), filled by the tests; printed (and written) after the module.
FIGURES: dict[str, tuple[int, int]] = {}


@pytest.fixture(scope="module", autouse=True)
def report_figures():
    yield
    if not FIGURES:
        return
    width = max(len(row) for row in FIGURES)
    print("\nfault matrix (survived / tried):")
    for row, (survived, tried) in FIGURES.items():
        print(f"  {row:<{width}}  {survived}/{tried}")
    out = os.environ.get("RLTRAINER_FAULT_MATRIX_JSON")
    if out:
        Path(out).write_text(json.dumps({row: list(pair) for row, pair in FIGURES.items()}, indent=2))


def iterations_of(result_json: bytes) -> list[int]:
    return [json.loads(line)["training_iteration"] for line in result_json.splitlines()]


def csv_iterations(progress_csv: bytes) -> list[int]:
    rows = csv.DictReader(progress_csv.decode().splitlines())
    return [int(row["training_iteration"]) for row in rows]


class MotoServer:
    """moto's S3 server on 127.0.0.1 that can go down and come back on the same port (its
    objects live in this process, so they survive the outage); the AWS variables a subprocess
    inherits point at it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = None
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(name, raising=False)
        for name, value in {
            "AWS_ACCESS_KEY_ID": "AKIAFAKEFAULTS",
            "AWS_SECRET_ACCESS_KEY": "fake-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        }.items():
            monkeypatch.setenv(name, value)

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def moto(monkeypatch):
    import boto3

    server = MotoServer(monkeypatch)
    server.start()
    boto3.session.Session().client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


# --- env runners -------------------------------------------------------------------------------


@pytest.mark.usefixtures("local_ray")
def test_env_runner_sigkill_x10_in_one_run():
    kills, rng = 10, random.Random(f"{SEED}-runners")
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2)
        .training(**FAST)
        .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=0)
        .debugging(seed=0, log_level="ERROR")
        .build()
    )
    try:
        algo.train()
        iteration_s = algo.train()["time_this_iter_s"]
        tried = 0
        while tried < kills:
            timer = None
            pid = None
            if algo.workers.healthy_env_runner_ids() == [1, 2]:  # both up (a replacement is in place)
                runner = algo.workers.remote_workers[rng.randrange(2)]
                # Killed after its last sample, it is dead already: the next train() replaces it.
                with contextlib.suppress(RayError):
                    pid = ray.get(runner.apply.remote(lambda _runner: os.getpid()), timeout=30)
            if pid is not None:
                timer = threading.Timer(rng.uniform(0, iteration_s), os.kill, (pid, signal.SIGKILL))
                timer.start()
                tried += 1
            result = algo.train()
            if timer is not None:
                timer.join()
        for _ in range(2):
            result = algo.train()
        survived = result["num_env_runner_restarts"]
        FIGURES["env runner SIGKILL, one run"] = (survived, tried)
        assert survived == tried and result["num_healthy_env_runners"] == 2
        weights = algo.get_policy().get_weights()
        for remote in algo.workers.foreach_worker(lambda w: w.get_weights(), local_worker=False):
            assert all((remote[name] == array).all() for name, array in weights.items())
    finally:
        algo.stop()


# --- the training process ----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "s3"])
def test_training_process_sigkill_x5_then_resume(where, tmp_path, request):
    """SIGKILL the CLI's process group (the driver and its Ray instance) at a random moment after
    each run's first new iteration; ``--resume`` after each; the last run trains to the end."""
    kills, stop, rng = 5, 40, random.Random(f"{SEED}-{where}")
    if where == "s3":
        request.getfixturevalue("moto")
        storage_path = f"s3://{BUCKET}/killed-{time.time_ns()}"
    else:
        storage_path = str(tmp_path / "results")
    config = {**FAST, "num_env_runners": 1, "min_time_s_per_iteration": 0.5}
    argv = [
        sys.executable, "-m", "rltrainer", "train", "--algo", "PPO", "--env", "CartPole-v1",
        "--config", json.dumps(config), "--stop", json.dumps({"training_iteration": stop}),
        "--storage-path", storage_path, "--name", "killed", "--checkpoint-freq", "1", "--resume",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    experiment = open_storage(f"{storage_path}/killed")

    def progress() -> dict:
        try:
            return json.loads(experiment.read_bytes("progress.json"))
        except (FileNotFoundError, ValueError):
            return {}

    outputs, tried, survived = [], 0, 0
    for kill in range(kills + 1):
        out = tmp_path / f"run{kill}.out"
        with open(out, "w") as sink:
            proc = subprocess.Popen(
                argv, env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            if kill == kills:  # the last run trains to the end
                assert proc.wait(timeout=300) == 0, out.read_text()[-3000:]
            else:
                before = progress().get("iteration") or 0
                wait_for("a new iteration", lambda: (progress().get("iteration") or 0) > before, 120, 0.1)  # noqa: B023
                time.sleep(rng.uniform(0, 2.0))  # anywhere in the next few iterations
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                tried += 1
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        outputs.append(out.read_text())
        if kill > 0 and "resuming from" in outputs[-1]:
            survived += 1
    FIGURES[f"training process SIGKILL + --resume ({where})"] = (survived, tried)
    assert survived == tried, outputs
    trial = open_storage(progress()["trial"])
    assert iterations_of(trial.read_bytes("result.json")) == list(range(1, stop + 1))
    assert csv_iterations(trial.read_bytes("progress.csv")) == list(range(1, stop + 1))
    assert progress()["finished"] and progress()["iteration"] == stop


# --- storage failing in the middle of a checkpoint ---------------------------------------------


def tiny(storage_path: str, **storage_options) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1, model={"fcnet_hiddens": [16]})
        .reporting(storage_path=storage_path, storage_options=storage_options, experiment_name="exp")
        .checkpointing(checkpoint_frequency=1)
        .debugging(seed=0)
    )


def after_results(algo, action) -> None:
    """Run ``action`` in the next ``train()`` once its result is written, just before its checkpoint."""
    log_result = algo._log_result

    def then_act(result):
        log_result(result)
        del algo._log_result  # once
        action()

    algo._log_result = then_act


def fail_every_other_checkpoint(algo, storage_uri: str, inject, repair, caplog) -> tuple[int, int]:
    """``TRIES`` times: a checkpoint that fails part way (``inject``), then, ``repair``ed, one that
    works (after a first ``train()`` that wrote checkpoint 1). Survived: training went on with a
    warning and the next checkpoint was written; the failed ones are not listed, and every listed
    checkpoint verifies."""
    survived = 0
    for _ in range(TRIES):
        after_results(algo, inject)
        failed = algo.train()
        repair()
        iteration = failed["training_iteration"]
        warned = f"checkpoint of iteration {iteration} not saved; training goes on" in caplog.text
        caplog.clear()
        if "checkpoint_path" not in failed and warned and "checkpoint_path" in algo.train():
            survived += 1
    listed = [info.iteration for info in list_checkpoints(storage_uri)]
    assert listed == CHECKPOINTED
    for info in list_checkpoints(storage_uri):
        with open_checkpoint(info.uri) as checkpoint:  # downloads and verifies every file
            assert checkpoint.metadata["counters"]["training_iteration"] == info.iteration
    return survived, TRIES


#: Checkpoints that fail, one every other iteration, and the iterations that have one in the end.
TRIES = 10
CHECKPOINTED = list(range(1, 2 * TRIES + 2, 2))


@pytest.mark.in_make_test
def test_s3_down_in_the_middle_of_a_checkpoint_x10(moto, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, "rltrainer")
    rng = random.Random(f"{SEED}-s3")
    root = f"s3://{BUCKET}/outage"
    algo = tiny(root, endpoint_url=moto.endpoint, max_attempts=2, retry_delay_s=0.01).build()
    upload_file, uploads_left = S3Storage.upload_file, [-1]

    def counting_upload(self, local, path):
        if uploads_left[0] == 0:
            moto.stop()  # the endpoint goes down before this file of the checkpoint
        uploads_left[0] -= 1
        return upload_file(self, local, path)

    def endpoint_down_after_some_files():
        # A checkpoint is 2 tensor files, 1 array file and the manifest: down before any of them.
        uploads_left[0] = rng.randrange(4)

    def endpoint_back():
        uploads_left[0] = -1
        moto.start()

    monkeypatch.setattr(S3Storage, "upload_file", counting_upload)
    try:
        algo.train()
        survived, tried = fail_every_other_checkpoint(
            algo, f"{root}/exp", endpoint_down_after_some_files, endpoint_back, caplog
        )
        trial = open_storage(algo.trial_uri)
        # The results' uploads failed too while the endpoint was down, and were made again.
        assert iterations_of(trial.read_bytes("result.json")) == list(range(1, CHECKPOINTED[-1] + 1))
    finally:
        algo.stop()
    FIGURES["S3 endpoint down during a checkpoint"] = (survived, tried)
    assert survived == tried


@pytest.mark.in_make_test
def test_disk_full_in_the_middle_of_a_checkpoint_x10(tmpfs, caplog):  # noqa: F811 - the fixture
    caplog.set_level(logging.WARNING, "rltrainer")
    rng = random.Random(f"{SEED}-disk")
    disk = tmpfs("8m")
    algo = tiny(str(disk)).build()
    fillers: list[Path] = []
    try:
        algo.train()
        trial_dir = Path(algo.trial_dir)
        size = sum(file.stat().st_size for file in (trial_dir / "checkpoint_000001").iterdir())

        def disk_full_part_way():
            fillers.append(fill(disk, rng.randrange(size)))

        def free_the_disk():
            fillers.pop().unlink()

        survived, tried = fail_every_other_checkpoint(
            algo, str(trial_dir.parent), disk_full_part_way, free_the_disk, caplog
        )
        folders = sorted(path.name for path in trial_dir.glob("checkpoint_*"))
        assert folders == [f"checkpoint_{i:06d}" for i in CHECKPOINTED]  # no partial one left
        assert iterations_of((trial_dir / "result.json").read_bytes()) == list(range(1, CHECKPOINTED[-1] + 1))
        assert csv_iterations((trial_dir / "progress.csv").read_bytes()) == list(
            range(1, CHECKPOINTED[-1] + 1)
        )
    finally:
        algo.stop()
    FIGURES["disk full during a checkpoint"] = (survived, tried)
    assert survived == tried
