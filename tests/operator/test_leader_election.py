"""Two operator replicas, one acting: leader election on a Lease, against the real API server.

Each replica is what the chart's Pod runs: ``python -m rltrainer_operator.leader_election --
kopf run --standalone ...`` (a process group of its own, as a container). The leader is killed
mid-life (SIGKILL: no chance to release; SIGTERM: a deleted Pod, which releases), and the other
takes over; an experiment driven through both never gets a second RayCluster or job, and its
status does not go back.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

import kubernetes
import pytest
from conftest import apply, experiment_manifest, get_experiment, wait_for
from test_watch_health import CuttingProxy, proxied_kubeconfig

from rltrainer_operator.leader_election import (
    LEASE_CALL_TIMEOUT_S,
    LEASE_DURATION_S,
    RENEW_DEADLINE_S,
    RETRY_PERIOD_S,
    Candidate,
    LeadingEnded,
)
from rltrainer_operator.readiness import ReadinessServer
from rltrainer_operator.testing.envtest import free_port
from tests.conftest import timeout_scale

LEASE = "rltrainer-operator"


class Replica:
    """One replica's elector and (once it leads) operator, as a process group."""

    def __init__(self, kube: Any, name: str, logs: Any, kubeconfig: Any = None) -> None:
        self.name = name
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or kube.kubeconfig),
            "POD_NAMESPACE": kube.ns,
            "POD_NAME": name,
            "RLTRAINER_OPERATOR_RAY_TOKEN_KEY": "test-key",
            "RLTRAINER_OPERATOR_POLL_INTERVAL_S": "1",
            "RLTRAINER_OPERATOR_METRICS_PORT": "0",
            # Progress reads go to a closed local port: nothing leaves this machine.
            "RLTRAINER_OPERATOR_S3_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
        }
        command = [
            sys.executable, "-m", "rltrainer_operator.leader_election", "--",
            sys.executable, "-m", "kopf", "run", "--standalone", "-m", "rltrainer_operator.handlers",
            f"--namespace={kube.ns}", f"--liveness=http://127.0.0.1:{free_port()}/healthz",
        ]  # fmt: skip
        self.log = logs / f"{name}.log"
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def tail(self, lines: int = 40) -> str:
        """This replica's last log lines and whether its elector still runs, for a failure's message."""
        state = "running" if self.process.poll() is None else f"exited {self.process.returncode}"
        said = self.log.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join([f"--- {self.name} ({state}):", *said])

    def operator_running(self) -> bool:
        """Whether this replica runs the operator (the elector has a child)."""
        done = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True)
        return bool(done.stdout.strip())

    def signal(self, sig: int) -> None:
        os.killpg(self.process.pid, sig)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def holder(kube: Any) -> str | None:
    api = kubernetes.client.CoordinationV1Api(kube.api_client)
    try:
        lease = api.read_namespaced_lease(LEASE, kube.ns)
    except kubernetes.client.ApiException:
        return None
    return lease.spec.holder_identity or None


@pytest.fixture
def replicas(kube, tmp_path):
    started: list[Replica] = []

    def start(name: str, kubeconfig: Any = None) -> Replica:
        replica = Replica(kube, name, tmp_path, kubeconfig)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()


def test_one_replica_acts_and_the_other_takes_over(kube, kuberay, ray_api, replicas):
    stop_ready = kuberay.run_in_background([kube.ns])
    try:
        a, b = replicas("replica-a"), replicas("replica-b")
        leader_name = wait_for("a leader", lambda: holder(kube), 60)
        leader, follower = (a, b) if leader_name == a.name else (b, a)
        wait_for("the leader's operator", leader.operator_running, 30)
        apply(kube, experiment_manifest())
        running = wait_for(
            "Running",
            lambda: (s := get_experiment(kube).get("status") or {}).get("phase") == "Running" and s,
            60,
        )
        assert not follower.operator_running(), "the follower runs an operator"

        # SIGKILL: no release; the follower takes over once the Lease expires.
        killed = time.monotonic()
        leader.signal(signal.SIGKILL)
        wait_for("the follower to lead", lambda: holder(kube) == follower.name, LEASE_DURATION_S + 20)
        took_over_s = time.monotonic() - killed
        assert took_over_s <= LEASE_DURATION_S + 3 * RETRY_PERIOD_S + 5, took_over_s
        wait_for("the new leader's operator", follower.operator_running, 30)

        # A replacement Pod follows; SIGTERM (a deleted Pod) releases the Lease at once.
        replacement = replicas("replica-c")
        time.sleep(2 * RETRY_PERIOD_S)
        assert holder(kube) == follower.name and not replacement.operator_running()
        terminated = time.monotonic()
        follower.signal(signal.SIGTERM)
        # Released, not waited out: the elector gives the Lease up once its operator has stopped
        # (kopf's own shutdown, seconds on a busy machine), then exits; the replacement takes it
        # at its next try rather than when the Lease would have expired.
        follower.process.wait(timeout=30 * timeout_scale())
        exited = time.monotonic()
        wait_for(
            "the replacement to lead",
            lambda: holder(kube) == replacement.name,
            LEASE_DURATION_S + 20,
            explain=lambda: "\n".join([f"holder {holder(kube)!r}", follower.tail(), replacement.tail()]),
        )
        handed_over_s, after_exit_s = time.monotonic() - terminated, time.monotonic() - exited
        assert f"{follower.name} released Lease" in follower.log.read_text(), follower.log.read_text()[-3000:]
        assert after_exit_s < LEASE_DURATION_S - RETRY_PERIOD_S, after_exit_s
        wait_for("its operator", replacement.operator_running, 30)

        ray_api.set(running["jobId"], "SUCCEEDED")
        done = wait_for(
            "Succeeded",
            lambda: (s := get_experiment(kube).get("status") or {}).get("phase") == "Succeeded" and s,
            60,
        )
        assert done["jobId"] == running["jobId"] and done["restarts"] == 0, done
        assert [s["submission_id"] for s in ray_api.submissions] == [running["jobId"]]  # one job
        created = [
            e["objectRef"].get("name") or e["requestURI"]
            for e in kube.requests(verb="create", resource="rayclusters")
            if e["responseStatus"]["code"] == 201
        ]
        assert len(created) == 1, created  # one RayCluster, by one of the three
        print(f"failover: {took_over_s:.1f} s after SIGKILL, {handed_over_s:.1f} s after SIGTERM")
    finally:
        stop_ready.set()


def renewed_at(kube: Any) -> float:
    api = kubernetes.client.CoordinationV1Api(kube.api_client)
    return api.read_namespaced_lease(LEASE, kube.ns).spec.renew_time.timestamp()


def test_a_leader_that_cannot_renew_stops_acting_before_its_lease_ends(kube, replicas, tmp_path):
    """The leader's API server goes silent (connections accepted, nothing answered, nothing
    closed): its renewals fail within their own bound, and it stops its operator before the
    Lease can pass to another replica, never after (no moment with two acting operators)."""
    url = urllib.parse.urlsplit(kube.plane.url)
    with CuttingProxy((url.hostname, url.port)) as proxy:
        leader = replicas("replica-a", proxied_kubeconfig(kube.kubeconfig, proxy.port, tmp_path))
        wait_for("it leads", lambda: holder(kube) == leader.name, 60)
        wait_for("its operator", leader.operator_running, 30)
        proxy.stall()
        last_renewal = renewed_at(kube)  # read past the proxy: the last renewal that got through
        wait_for("the operator stopped", lambda: not leader.operator_running(), LEASE_DURATION_S + 20)
        stopped = time.time()
        assert leader.process.wait(timeout=10) == 1
    # Before the Lease could end for the others (the renewal in flight at the deadline included).
    assert stopped - last_renewal < LEASE_DURATION_S, stopped - last_renewal
    assert stopped - last_renewal >= RENEW_DEADLINE_S - RETRY_PERIOD_S - 1, "stopped before its deadline"
    assert RENEW_DEADLINE_S + 2 * LEASE_CALL_TIMEOUT_S < LEASE_DURATION_S
    print(f"stopped acting {stopped - last_renewal:.1f} s after its last renewal")


def test_a_replica_refused_the_lease_says_why_and_stays_up(kube, replicas, tmp_path):
    """A replica whose ServiceAccount may not read the Lease (the chart's leader-election Role
    gone): it says so in one line naming the cause, keeps trying, and runs no operator."""
    kube.core.create_namespaced_service_account(kube.ns, {"metadata": {"name": "no-lease"}})
    kubeconfig = kube.plane.service_account_kubeconfig(kube.ns, "no-lease", tmp_path / "no-lease.kubeconfig")
    replica = replicas("replica-refused", kubeconfig)
    said = wait_for(
        "the refusal said",
        lambda: "cannot lead: the API server forbids" in (text := replica.log.read_text()) and text,
        30,
    )
    assert "leader-election Role" in said and "Traceback" not in said, said
    time.sleep(2 * RETRY_PERIOD_S)  # retried, said once
    assert replica.process.poll() is None and not replica.operator_running()
    assert replica.log.read_text().count("cannot lead") == 1


def test_a_follower_answers_the_pods_probes_until_it_leads(monkeypatch):
    """Alive and ready to take over while it follows (a rollout waits for the new Pod to be ready);
    leading, it frees both ports for the operator's own endpoints."""
    liveness, readiness = free_port(), free_port()
    monkeypatch.setenv("RLTRAINER_OPERATOR_READINESS_PORT", str(readiness))
    command = ["kopf", "run", f"--liveness=http://127.0.0.1:{liveness}/healthz"]
    candidate = Candidate(command, LEASE, "ns", "replica-a")
    candidate.serve_health()
    try:
        for port, path in ((liveness, "/healthz"), (readiness, "/readyz")):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                assert answer.status == 200, path
    finally:
        candidate.stop_health()
    ReadinessServer(readiness, lambda: None).close()  # the port is the operator's again


@pytest.mark.parametrize("operator_alive", [True, False])
def test_a_terminated_leader_releases_even_when_its_operator_went_first(monkeypatch, operator_alive):
    """SIGTERM to the Pod's whole process group reaches the operator too: it may have ended before
    the elector's handler runs, and the Lease must still be given up, not waited out (15 s)."""
    from rltrainer_operator import leader_election

    candidate = Candidate(["sleep", "30"], LEASE, "ns", "replica-a")
    candidate.child = subprocess.Popen(["sleep", "30"] if operator_alive else ["true"])
    if not operator_alive:
        candidate.child.wait()
    released, exits = [], []
    monkeypatch.setattr(candidate, "release", lambda: released.append(True))
    monkeypatch.setattr(leader_election.os, "_exit", exits.append)
    leader_election._terminate(candidate)
    assert released == [True] and exits == [0]
    assert candidate.child.poll() is not None


def lease_held_by(kube: Any, identity: str) -> None:
    """The Lease as a leader that renewed it just now leaves it."""
    now = datetime.datetime.now(datetime.UTC)
    spec = kubernetes.client.V1LeaseSpec(
        holder_identity=identity, lease_duration_seconds=LEASE_DURATION_S, acquire_time=now, renew_time=now
    )
    lease = kubernetes.client.V1Lease(metadata=kubernetes.client.V1ObjectMeta(name=LEASE), spec=spec)
    kubernetes.client.CoordinationV1Api(kube.api_client).create_namespaced_lease(kube.ns, lease)


def test_a_terminated_follower_leaves_the_lease_alone(kube, monkeypatch):
    from rltrainer_operator import leader_election

    lease_held_by(kube, "replica-b")
    candidate = Candidate(["sleep", "30"], LEASE, kube.ns, "replica-a", kube.api_client)
    exits = []
    monkeypatch.setattr(leader_election.os, "_exit", exits.append)
    leader_election._terminate(candidate)
    assert exits == [0] and holder(kube) == "replica-b"


def test_sigterm_between_winning_the_lease_and_starting_the_operator_releases(kube, monkeypatch):
    """The Pod deleted a moment after its replica won the Lease, before its operator started (the
    election starts it in a thread of its own): the Lease is released, not left to expire (a
    15 s wait for the others), and no operator starts after the signal."""
    from rltrainer_operator import leader_election

    lease_held_by(kube, "replica-a")
    candidate = Candidate(["sleep", "30"], LEASE, kube.ns, "replica-a", kube.api_client)
    exits = []
    monkeypatch.setattr(leader_election.os, "_exit", exits.append)
    leader_election._terminate(candidate)
    assert exits == [0] and holder(kube) is None
    with pytest.raises(LeadingEnded, match="not started"):
        candidate.lead()
    assert candidate.child is None


@pytest.mark.parametrize(
    ("raised", "level"),
    [(LeadingEnded("the operator ended with status 0"), "INFO"), (OSError("no such file"), "ERROR")],
)
def test_the_end_of_leading_stops_the_renewals_and_a_normal_end_is_no_error(raised, level, caplog):
    """The operator's end stops the renewals (the client's election stops when its callback
    raises); an end as such is an info line, not the client's error with a traceback."""
    from kubernetes.leaderelection import electionconfig

    from rltrainer_operator import leader_election

    def lead():
        raise raised

    config = electionconfig.Config(
        leader_election.bounded_lease_lock(LEASE, "ns", "replica-a"),
        LEASE_DURATION_S,
        RENEW_DEADLINE_S,
        RETRY_PERIOD_S,
        lead,
        lambda: None,
    )
    stop = threading.Event()
    with caplog.at_level(logging.INFO):
        leader_election._election(config).run_onstarted_leading(stop)
    assert stop.is_set()
    assert [r.levelname for r in caplog.records if r.levelno >= logging.INFO] == [level]
    assert str(raised) in caplog.text


def test_an_operator_slow_to_stop_is_killed_in_time_to_release(monkeypatch):
    """An operator that ignores SIGTERM is killed within the Pod's grace period less the release's
    time, and the Lease is released before the kubelet's SIGKILL would end the elector."""
    from rltrainer_operator import leader_election

    monkeypatch.setenv(leader_election.GRACE_VARIABLE, str(leader_election.RELEASE_MARGIN_S + 2))
    candidate = Candidate(["sleep", "30"], LEASE, "ns", "replica-a")
    candidate.child = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 30"])
    time.sleep(0.3)  # the trap is set
    released, exits = [], []
    monkeypatch.setattr(candidate, "release", lambda: released.append(time.monotonic()))
    monkeypatch.setattr(leader_election.os, "_exit", exits.append)
    started = time.monotonic()
    leader_election._terminate(candidate)
    assert candidate.child.returncode == -signal.SIGKILL
    assert exits == [0] and released and released[0] - started < 2 + 1


@pytest.mark.parametrize(("grace", "wait"), [("", 30 - 4.0), ("20", 16.0), ("3", 1.0), ("soon", 30 - 4.0)])
def test_the_stop_wait_leaves_time_to_release(monkeypatch, grace, wait):
    from rltrainer_operator import leader_election

    monkeypatch.setenv(leader_election.GRACE_VARIABLE, grace)
    assert leader_election.RELEASE_MARGIN_S == 4.0
    assert leader_election.stop_wait_s() == wait
