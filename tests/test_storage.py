"""Storage: S3 (a real S3 server, SeaweedFS, on 127.0.0.1) and local checkpoints with manifests,
retention, resume.

The session's S3 server (``real_s3``) serves the module; every test writes under its own prefix
of one bucket, with the pods' identity (``trainer``: read and write) from the environment, whose
keys must never show up in any output. moto's server only where a test takes S3 down and brings it
back on the same port in the middle of a run (it restarts in-process in milliseconds).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.checkpoint_store import (
    apply_retention,
    latest_checkpoint,
    list_checkpoints,
    upload_checkpoint,
)
from rltrainer.checkpoints import METADATA_FILE
from rltrainer.cli import main
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.experiment import run_experiment
from rltrainer.storage import S3Storage, StorageError, check_storage_path, open_storage
from rltrainer_operator.testing.s3_server import UNMADE_BUCKET
from tests.conftest import use_s3_identity

REPO = Path(__file__).resolve().parents[1]
BUCKET = "rltrainer-test"
#: The keys the module's tests run with (the S3 server's ``trainer`` identity, set by ``s3_endpoint``).
KEYS: dict[str, str] = {}
FAST_RETRIES = {"max_attempts": 3, "retry_delay_s": 0.01}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint(real_s3):
    """The real S3 server, with the pods' identity in the environment (``AWS_ENDPOINT_URL`` too:
    what the CLI uses, the standard AWS variable)."""
    with pytest.MonkeyPatch.context() as mp:
        use_s3_identity(mp, real_s3)
        KEYS.update(real_s3.identity("trainer").env())
        yield real_s3.endpoint


@pytest.fixture
def s3_root(request) -> str:
    """A fresh prefix for one test."""
    request.getfixturevalue("s3_endpoint")
    return f"s3://{BUCKET}/{re.sub(r'[^A-Za-z0-9_-]', '-', request.node.name)}-{time.time_ns()}"


def tiny_config(storage_path: str, endpoint: str | None = None, **checkpointing) -> PPOConfig:
    options = {"endpoint_url": endpoint, **FAST_RETRIES} if endpoint else {}
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, observation_filter="MeanStdFilter")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=storage_path, storage_options=options, experiment_name="exp")
        .checkpointing(**checkpointing)
        .debugging(seed=0)
    )


def assert_no_credentials(*texts: str) -> None:
    assert KEYS, "no keys to look for"
    for text in texts:
        assert KEYS["AWS_SECRET_ACCESS_KEY"] not in text
        assert KEYS["AWS_ACCESS_KEY_ID"] not in text


# --- round trip, manifests, verification ------------------------------------------------------


def test_save_list_restore_round_trip_on_s3(s3_endpoint, s3_root, capsys, caplog):
    algo = tiny_config(s3_root, s3_endpoint, checkpoint_frequency=1).build()
    try:
        results = [algo.train() for _ in range(2)]
        paths = [r["checkpoint_path"] for r in results]
        assert paths == [f"{algo.trial_uri}/checkpoint_{i:06d}" for i in (1, 2)]
        assert algo.trial_uri.startswith(f"{s3_root}/exp/PPO_CartPole-v1_")
        found = list_checkpoints(f"{s3_root}/exp")
        assert [info.uri for info in found] == paths  # newest last
        assert [info.iteration for info in found] == [1, 2]
        assert 0 < found[0].timesteps < found[1].timesteps == algo.counters.timesteps_total
        assert latest_checkpoint(s3_root).uri == paths[-1]
        names = open_storage(algo.trial_uri).list()
        for name in ("params.json", "result.json", "progress.csv"):
            assert name in names
        assert any(name.startswith("events.out.tfevents.") for name in names)
        restored = Algorithm.from_checkpoint(paths[-1])
        try:
            assert restored.counters == algo.counters
            for name, tensor in algo.get_policy().get_weights().items():
                assert (restored.get_policy().get_weights()[name] == tensor).all()
            assert restored.train()["training_iteration"] == 3
        finally:
            restored.stop()
        fresh = tiny_config(s3_root, s3_endpoint).build()
        try:
            fresh.restore(paths[0])
            assert fresh.counters.training_iteration == 1
        finally:
            fresh.stop()
    finally:
        algo.stop()
    captured = capsys.readouterr()
    assert_no_credentials(captured.out, captured.err, caplog.text, repr(open_storage(s3_root)))


@pytest.fixture(scope="module")
def local_checkpoint(tmp_path_factory) -> Path:
    algo = tiny_config(str(tmp_path_factory.mktemp("results"))).build()
    try:
        algo.train()
        return Path(algo.save(str(tmp_path_factory.mktemp("ckpt") / "checkpoint_000001")))
    finally:
        algo.stop()


@pytest.mark.usefixtures("s3_endpoint")
def test_checkpoint_without_manifest_does_not_exist(s3_root, local_checkpoint):
    trial = f"{s3_root}/exp/trial"
    upload_checkpoint(local_checkpoint, f"{trial}/checkpoint_000001")
    storage = open_storage(trial)
    for name in ("policy.safetensors", "optimizer.safetensors", "filter.npz"):  # an upload cut short
        storage.upload_file(local_checkpoint / name, f"checkpoint_000005/{name}")
    assert [info.uri for info in list_checkpoints(s3_root)] == [f"{trial}/checkpoint_000001"]
    assert latest_checkpoint(trial).iteration == 1
    with pytest.raises(CheckpointError, match=f"is not an rltrainer checkpoint: it has no {METADATA_FILE}"):
        Algorithm.from_checkpoint(f"{trial}/checkpoint_000005")
    with pytest.raises(CheckpointError, match="does not exist"):
        Algorithm.from_checkpoint(f"{trial}/checkpoint_000099")


@pytest.mark.usefixtures("s3_endpoint")
def test_tampered_file_fails_verification(s3_root, local_checkpoint):
    uri = upload_checkpoint(local_checkpoint, f"{s3_root}/checkpoint_000001")
    storage = open_storage(uri)
    data = bytearray(storage.read_bytes("policy.safetensors"))
    data[-1] ^= 0xFF
    storage.write_bytes("policy.safetensors", bytes(data))
    message = f"checkpoint '{uri}' is corrupted: policy.safetensors does not match its recorded sha256"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        Algorithm.from_checkpoint(uri)


@pytest.mark.usefixtures("s3_endpoint")
def test_failed_upload_leaves_the_previous_checkpoint_latest(s3_root, local_checkpoint, monkeypatch):
    trial = f"{s3_root}/trial"
    upload_checkpoint(local_checkpoint, f"{trial}/checkpoint_000001")
    real_upload = S3Storage.upload_file

    def fail_midway(self, local, path):
        if path == "optimizer.safetensors":
            raise StorageError(f"cannot upload {self.uri}/{path}: connection reset")
        return real_upload(self, local, path)

    monkeypatch.setattr(S3Storage, "upload_file", fail_midway)
    with pytest.raises(StorageError, match="connection reset"):
        upload_checkpoint(local_checkpoint, f"{trial}/checkpoint_000002")
    assert open_storage(f"{trial}/checkpoint_000002").list() == ["policy.safetensors"]
    assert latest_checkpoint(trial).uri == f"{trial}/checkpoint_000001"


# --- retention ----------------------------------------------------------------------------------


def test_retention_keeps_the_newest_on_s3(s3_endpoint, s3_root):
    algo = tiny_config(s3_root, s3_endpoint, checkpoint_frequency=1, num_to_keep=2).build()
    try:
        for _ in range(4):
            algo.train()
        assert [info.iteration for info in list_checkpoints(algo.trial_uri)] == [3, 4]
        left = open_storage(algo.trial_uri).list()
        assert not [name for name in left if name.startswith(("checkpoint_000001", "checkpoint_000002"))]
    finally:
        algo.stop()


def fake_checkpoint(storage, name: str, saved_at: float, score: float | None) -> None:
    metadata = {"format_version": 1, "saved_at": saved_at, "files": {}, "score": {"value": score}}
    storage.write_bytes(f"{name}/{METADATA_FILE}", json.dumps(metadata).encode())


@pytest.mark.parametrize(
    ("order", "kept"),
    [("max", ["c3", "c5", "c6"]), ("min", ["c2", "c6"]), (None, ["c5", "c6"])],
)
def test_retention_by_score_keeps_the_best_and_the_newest(tmp_path, order, kept):
    storage = open_storage(tmp_path)
    for i, score in enumerate([7.0, 1.0, 9.0, None, 8.0, 2.0], start=1):
        fake_checkpoint(storage, f"c{i}", saved_at=float(i), score=score)
    deleted = apply_retention(str(tmp_path), 2, order)
    assert sorted(Path(uri).name for uri in deleted) == sorted({f"c{i}" for i in range(1, 7)} - set(kept))
    assert [Path(info.uri).name for info in list_checkpoints(str(tmp_path))] == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


def test_score_is_saved_in_the_manifest(tmp_path):
    config = tiny_config(str(tmp_path), checkpoint_frequency=1, num_to_keep=1)
    algo = config.checkpointing(
        checkpoint_score_attribute="timesteps_total", checkpoint_score_order="min"
    ).build()
    try:
        for _ in range(3):
            algo.train()
        found = list_checkpoints(algo.trial_uri)
        # The best (fewest timesteps) and the newest survive.
        assert [info.iteration for info in found] == [1, 3]
        assert [info.score for info in found] == [float(info.timesteps) for info in found]
        assert found[0].metadata["score"]["attribute"] == "timesteps_total"
    finally:
        algo.stop()


# --- resume ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_resume_continues_from_the_newest_checkpoint(backend, tmp_path, s3_endpoint, s3_root):
    root = str(tmp_path) if backend == "local" else s3_root
    config = tiny_config(root, s3_endpoint if backend == "s3" else None, checkpoint_frequency=1)
    first = run_experiment(config.copy(), {"training_iteration": 2})
    assert first.resumed_from is None
    second = run_experiment(config.copy(), {"training_iteration": 4}, resume=True)
    assert second.resumed_from == first.checkpoint_path
    assert second.trial_dir == first.trial_dir  # results go on in the same trial folder
    assert second.last_result["training_iteration"] == 4
    assert second.last_result["episodes_total"] > first.last_result["episodes_total"]
    assert second.last_result["timesteps_total"] > first.last_result["timesteps_total"]
    assert [info.iteration for info in list_checkpoints(f"{root}/exp")] == [1, 2, 3, 4]
    lines = open_storage(str(first.trial_dir)).read_bytes("result.json").decode().splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1, 2, 3, 4]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_progress_object_tracks_each_iteration_and_the_end(backend, tmp_path, s3_endpoint, s3_root):
    root = str(tmp_path) if backend == "local" else s3_root
    config = tiny_config(root, s3_endpoint if backend == "s3" else None, checkpoint_frequency=2)
    config.checkpointing(checkpoint_at_end=True)
    result = run_experiment(config, {"training_iteration": 3})
    storage = open_storage(f"{root}/exp", config.storage_options)
    progress = json.loads(storage.read_bytes("progress.json"))
    assert progress["iteration"] == 3
    assert progress["timesteps"] == result.last_result["timesteps_total"]
    assert progress["last_checkpoint"] == result.checkpoint_path  # the one saved at the end
    assert progress["finished"] is True and progress["stopped_by"] == "training_iteration"
    assert progress["trial"] == str(result.trial_dir)
    assert progress["num_healthy_env_runners"] == 0


def test_resume_from_tries_the_given_checkpoint_first(tmp_path):
    config = tiny_config(str(tmp_path), checkpoint_frequency=1)
    first = run_experiment(config.copy(), {"training_iteration": 3})
    checkpoints = [info.uri for info in list_checkpoints(f"{tmp_path}/exp")]
    again = run_experiment(config.copy(), {"training_iteration": 4}, resume=True, resume_from=checkpoints[1])
    assert again.resumed_from == checkpoints[1]
    assert again.last_result["training_iteration"] == 4  # 2 + 2 more: it really started from iteration 2
    # A checkpoint that does not exist (or verify) falls back to the newest valid one.
    missing = f"{first.trial_dir}/checkpoint_000099"
    fallback = run_experiment(config.copy(), {"training_iteration": 5}, resume=True, resume_from=missing)
    assert fallback.resumed_from == f"{first.trial_dir}/checkpoint_000004"


def test_resuming_a_finished_run_stops_without_training(tmp_path):
    config = tiny_config(str(tmp_path), checkpoint_frequency=1)
    first = run_experiment(config.copy(), {"training_iteration": 2})
    again = run_experiment(config.copy(), {"training_iteration": 2}, resume=True)
    assert again.resumed_from == first.checkpoint_path == again.checkpoint_path
    assert again.stopped_by == "training_iteration"
    assert again.iterations == 2
    assert [info.iteration for info in list_checkpoints(f"{tmp_path}/exp")] == [1, 2]


def test_resume_skips_a_damaged_newest_checkpoint(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "rltrainer")
    config = tiny_config(str(tmp_path), checkpoint_frequency=1)
    first = run_experiment(config.copy(), {"training_iteration": 2})
    damaged = Path(first.checkpoint_path) / "policy.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-1])
    second = run_experiment(config.copy(), {"training_iteration": 2}, resume=True)
    assert second.resumed_from == str(Path(first.checkpoint_path).parent / "checkpoint_000001")
    assert second.last_result["training_iteration"] == 2
    assert "skipping" in caplog.text and "does not match its recorded sha256" in caplog.text


def test_resume_without_checkpoint_starts_fresh(tmp_path, caplog, capsys):
    caplog.set_level(logging.WARNING, "rltrainer")
    result = run_experiment(tiny_config(str(tmp_path)), {"training_iteration": 1}, resume=True)
    assert result.resumed_from is None
    assert result.last_result["training_iteration"] == 1
    assert "starting fresh" in caplog.text
    train = [
        "train", "--algo", "PPO", "--env", "CartPole-v1", "--storage-path", str(tmp_path / "cli"),
        "--stop", '{"training_iteration": 1}', "--config", '{"train_batch_size": 64, "minibatch_size": 64}',
        "--checkpoint-freq", "1", "--resume",
    ]  # fmt: skip
    assert main(train) == 0
    assert "no checkpoint to resume from: starting fresh" in capsys.readouterr().out
    assert main(train) == 0
    assert re.search(r"^resuming from .*checkpoint_000001$", capsys.readouterr().out, re.MULTILINE)


def test_resume_after_sigkill(tmp_path):
    train = [
        sys.executable, "-m", "rltrainer", "train", "--algo", "PPO", "--env", "CartPole-v1",
        "--storage-path", str(tmp_path), "--name", "killed", "--checkpoint-freq", "1", "--resume",
        "--config", '{"train_batch_size": 64, "minibatch_size": 64, "num_epochs": 1}',
    ]  # fmt: skip
    proc = subprocess.Popen([*train, "--stop", '{"training_iteration": 1000000}'], cwd=REPO, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("killed/*/checkpoint_000002/" + METADATA_FILE)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    newest = latest_checkpoint(str(tmp_path / "killed"))
    stop = newest.iteration + 2
    done = subprocess.run(
        [*train, "--stop", json.dumps({"training_iteration": stop})],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"resuming from {newest.uri}" in done.stdout
    assert re.search(rf"^iter={stop} ", done.stdout, re.MULTILINE)
    assert len(list(tmp_path.glob("killed/*/"))) == 1  # the same trial folder


# --- retries, outages, credentials ------------------------------------------------------------------


def stubbed(endpoint: str) -> tuple[S3Storage, Stubber]:
    client = boto3.session.Session().client("s3", endpoint_url=endpoint)
    return S3Storage(f"s3://{BUCKET}/stub", {"retry_delay_s": 0.001}, client=client), Stubber(client)


def test_transient_errors_are_retried(s3_endpoint):
    storage, stubber = stubbed(s3_endpoint)
    stubber.add_client_error("put_object", "SlowDown", "Please reduce your request rate.", 503)
    stubber.add_client_error("put_object", "ThrottlingException", "Rate exceeded", 400)
    stubber.add_response("put_object", {})
    with stubber:
        storage.write_bytes("a", b"data")
    stubber.assert_no_pending_responses()


def test_permanent_errors_fail_at_once_and_retries_are_bounded(s3_endpoint):
    storage, stubber = stubbed(s3_endpoint)
    stubber.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
    for _ in range(4):
        stubber.add_client_error("get_object", "InternalError", "We encountered an internal error", 500)
    with stubber:
        with pytest.raises(StorageError, match="cannot write .*: PutObject: AccessDenied"):
            storage.write_bytes("a", b"data")
        with pytest.raises(StorageError, match="after 4 attempts: GetObject: InternalError"):
            storage.read_bytes("a")
    stubber.assert_no_pending_responses()


def test_connection_errors_are_retried(s3_endpoint, monkeypatch):
    storage = S3Storage(f"s3://{BUCKET}/conn", {"retry_delay_s": 0.001, "endpoint_url": s3_endpoint})
    real = storage.client.put_object
    calls = []

    def flaky(**kwargs):
        calls.append(kwargs["Key"])
        if len(calls) <= 2:
            raise EndpointConnectionError(endpoint_url=s3_endpoint)
        return real(**kwargs)

    monkeypatch.setattr(storage.client, "put_object", flaky)
    storage.write_bytes("x", b"1")
    assert calls == ["conn/x"] * 3
    assert storage.read_bytes("x") == b"1"


@pytest.mark.usefixtures("s3_endpoint")
def test_outage_during_auto_checkpoint_warns_and_training_goes_on(caplog, capsys):
    """moto's server: S3 goes down between two checkpoints and comes back on the same port."""
    caplog.set_level(logging.WARNING, "rltrainer")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)  # moto: any keys do
    root = f"s3://{BUCKET}/outage-{time.time_ns()}"
    algo = tiny_config(root, endpoint, checkpoint_frequency=1).build()
    try:
        assert "checkpoint_path" in algo.train()
        server.stop()
        result = algo.train()  # the endpoint is down: no checkpoint, a warning, training goes on
        assert "checkpoint_path" not in result
        assert "checkpoint of iteration 2 not saved; training goes on" in caplog.text
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        assert algo.train()["checkpoint_path"].endswith("checkpoint_000003")
        assert [info.iteration for info in list_checkpoints(root, {"endpoint_url": endpoint})] == [1, 3]
    finally:
        algo.stop()
        server.stop()
    captured = capsys.readouterr()
    assert_no_credentials(captured.out, captured.err, caplog.text)


@pytest.mark.usefixtures("s3_endpoint")
def test_credentials_stay_out_of_configs_and_errors(monkeypatch):
    with pytest.raises(ConfigError, match="does not belong in storage_options") as err:
        PPOConfig().reporting(storage_options={"aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"]})
    assert_no_credentials(str(err.value))
    with pytest.raises(ConfigError, match="unknown storage option 'endpoint'"):
        PPOConfig().reporting(storage_options={"endpoint": "http://x"})
    storage = open_storage(f"s3://no-such-bucket-{time.time_ns()}/x")
    with pytest.raises(StorageError) as err:
        storage.write_bytes("a", b"1")
    assert_no_credentials(str(err.value), repr(storage))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError, match="credentials"):
        open_storage(f"s3://{BUCKET}/x").read_bytes("a")


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("s3_endpoint")
def test_cli_train_list_download_inspect_evaluate_on_s3(s3_root, tmp_path, capsys, real_s3):
    train = [
        "train", "--algo", "PPO", "--env", "CartPole-v1", "--storage-path", s3_root, "--name", "cli",
        "--stop", '{"training_iteration": 2}', "--checkpoint-freq", "1",
        "--config", '{"train_batch_size": 64, "minibatch_size": 64, "num_epochs": 1}',
    ]  # fmt: skip
    assert main(train) == 0
    out = capsys.readouterr().out
    assert f"trial directory: {s3_root}/cli/PPO_CartPole-v1_" in out
    checkpoint = re.search(r"^checkpoint: (\S+)$", out, re.MULTILINE).group(1)
    assert checkpoint.startswith(s3_root) and checkpoint.endswith("checkpoint_000002")
    trial = checkpoint.rsplit("/", 1)[0]

    assert main(["checkpoints", "list", f"{s3_root}/cli"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["iter", "timesteps", "score", "size"]
    assert [row.split()[0] for row in rows] == ["1", "2"]
    assert rows[-1].endswith(checkpoint)

    target = tmp_path / "downloaded"
    assert main(["checkpoints", "download", checkpoint, str(target)]) == 0
    assert "sha256 verified" in capsys.readouterr().out
    assert (target / METADATA_FILE).is_file()
    assert main(["checkpoints", "list", str(target)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    assert main(["checkpoints", "inspect", checkpoint]) == 0
    out = capsys.readouterr().out
    assert "algorithm: PPO" in out and "iteration: 2" in out and '"type": "Discrete"' in out
    assert out.splitlines()[-1].startswith("integrity: OK")

    assert main(["evaluate", checkpoint, "--episodes", "1"]) == 0
    assert "mean return over 1 episode" in capsys.readouterr().out
    with pytest.MonkeyPatch.context() as mp:  # a key that may only read evaluates it too
        use_s3_identity(mp, real_s3, "reader")
        assert main(["evaluate", checkpoint, "--episodes", "1"]) == 0, capsys.readouterr().err
    assert "mean return over 1 episode" in capsys.readouterr().out
    assert main(["evaluate", trial]) == 2
    assert f"newest checkpoint: {checkpoint}" in capsys.readouterr().err

    storage = open_storage(checkpoint)
    storage.write_bytes("filter.npz", b"not the filter")
    assert main(["checkpoints", "inspect", checkpoint]) == 1
    out = capsys.readouterr().out
    assert "integrity: FAILED: " in out and "filter.npz does not match its recorded sha256" in out
    assert main(["checkpoints", "download", checkpoint, str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rltrainer: error: ") and err.count("\n") == 1
    assert main(["checkpoints", "download", checkpoint, str(target)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert main(["checkpoints", "list", f"{s3_root}/nothing"]) == 0
    assert "no checkpoints under" in capsys.readouterr().out


def test_a_local_listing_skips_what_it_cannot_read(tmp_path: Path, monkeypatch) -> None:
    """A folder deleted while it is listed (a running trial rotating its checkpoints) and an entry
    this process may not stat are skipped, as ``find`` does, instead of ending the listing."""
    import os

    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "a.txt").write_text("a")
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "b.txt").write_text("b")
    (tmp_path / "secret.txt").write_text("c")
    scandir, stat = os.scandir, os.stat

    def deleted_meanwhile(path="."):
        if os.fspath(path).endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return scandir(path)

    def not_allowed(path, *args, **kwargs):
        if os.fspath(path).endswith("secret.txt"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", deleted_meanwhile)
    monkeypatch.setattr(os, "stat", not_allowed)
    assert open_storage(str(tmp_path)).list() == ["kept/a.txt"]


# --- the real S3 server's refusals --------------------------------------------------------------

#: An identity of the S3 server, or the pods' key with a wrong secret: what ``check_storage_path``
#: says for each (the bucket and the S3 call in its words).
REFUSALS = {
    "reader": (BUCKET, "PutObject: AccessDenied"),
    "nobody": (BUCKET, "ListObjectsV2: AccessDenied"),
    "wrong-secret": (BUCKET, "ListObjectsV2: SignatureDoesNotMatch"),
    "trainer": (UNMADE_BUCKET, "ListObjectsV2: NoSuchBucket"),
}


@pytest.mark.parametrize("who", REFUSALS)
def test_a_storage_path_the_keys_cannot_write_is_refused_before_training(who, real_s3, monkeypatch):
    bucket, words = REFUSALS[who]
    use_s3_identity(monkeypatch, real_s3, "trainer" if who == "wrong-secret" else who)
    if who == "wrong-secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-key")
    uri = f"s3://{bucket}/refused-{who}-{time.time_ns()}"
    with pytest.raises(StorageError) as err:
        check_storage_path(uri, FAST_RETRIES, write=True)
    assert str(err.value).startswith(f"storage_path {uri!r} cannot be used: ") and words in str(err.value)
    assert real_s3.identity(who if who in real_s3.identities else "trainer").secret_key not in str(err.value)
    if bucket == BUCKET:  # nothing written, no probe left behind
        prefix = uri.removeprefix(f"s3://{BUCKET}/")
        assert not real_s3.client("admin").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents")


def test_the_pods_keys_pass_the_probe_and_leave_nothing(real_s3, monkeypatch):
    use_s3_identity(monkeypatch, real_s3)
    uri = f"s3://{BUCKET}/probed-{time.time_ns()}"
    check_storage_path(uri, FAST_RETRIES, write=True)
    prefix = uri.removeprefix(f"s3://{BUCKET}/")
    assert not real_s3.client("admin").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents")


def test_listing_more_than_one_page_on_the_real_server(real_s3, monkeypatch):
    """The server answers 1,000 keys a page: ``list`` follows the continuation tokens."""
    use_s3_identity(monkeypatch, real_s3)
    storage = S3Storage(f"s3://{BUCKET}/many-{time.time_ns()}", FAST_RETRIES)
    admin = real_s3.client("admin")
    names = [f"k{i:04d}" for i in range(1005)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(lambda n: admin.put_object(Bucket=BUCKET, Key=f"{storage.prefix}/{n}", Body=b""), names)
        )
    assert storage.list() == names
