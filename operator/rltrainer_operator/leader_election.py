"""One acting operator among replicas: leader election on a ``coordination.k8s.io/v1`` Lease.

Every replica runs this elector; only the one holding the Lease runs the operator (``kopf run
--standalone ...``, a child process). It is what KubeRay's and Kueue's controllers do (client-go's
``leaderelection`` on a Lease, through controller-runtime), with client-go's timings: a 15 s lease,
renewed every 2 s, given up when it could not be renewed for 10 s. Kopf's own peering was the
other choice; it is not one here: it keeps its peers in a cluster-scoped custom resource of its
own (a CRD to install, cluster-wide write permission), and a paused peer only stops handling
after it notices the other's higher priority, while a Lease is the object every platform
engineer already reads (``kubectl get lease -n <ns>``) and its holder is the one identity that
acts.

The leader stops acting before anyone else may start: when a renewal fails past the deadline
(10 s, while the Lease lasts 15 s for the others) the operator child is killed at once and the
elector exits, so the Pod restarts as a follower. When the operator child ends by itself, the
elector releases the Lease (the standby takes over in about one retry period, 2 s) and exits with
the child's status. A follower answers the liveness probe on the operator's ``--liveness`` address
and the readiness probe on its ``RLTRAINER_OPERATOR_READINESS_PORT`` until it leads; then the
operator answers them.

    python -m rltrainer_operator.leader_election -- kopf run --standalone -m rltrainer_operator.handlers ...

Environment: ``RLTRAINER_LEADER_ELECTION`` (``true`` by default; ``false`` runs the command at
once, as a single replica does), ``RLTRAINER_LEADER_ELECTION_LEASE`` (the Lease's name),
``POD_NAMESPACE`` (where it lives) and ``POD_NAME`` (this replica's identity; the Helm chart sets
both from the downward API), and ``KUBECONFIG`` outside a cluster.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger("rltrainer_operator.leader_election")

#: client-go's defaults (controller-runtime's too).
LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S = 15, 10, 2
#: Each Lease call's limit, one attempt (no retries): a renewal (a read and a replace) started
#: just before the renew deadline still ends, failed, before the Lease can expire for the others
#: (10 + 2 x 1.5 < 15 s). Without it a call on a silent connection (a half-open one after a
#: network fault) would block the renewals past the deadline while the operator acts on: two
#: leaders.
LEASE_CALL_TIMEOUT_S = 1.5
#: A refused Lease call is said once a minute (the retries go on every retry period).
REFUSAL_LOG_INTERVAL_S = 60
DEFAULT_LEASE = "rltrainer-operator"
#: The Pod's terminationGracePeriodSeconds (the chart sets it; Kubernetes' default otherwise):
#: on SIGTERM the operator gets this less ``RELEASE_MARGIN_S`` to stop, then is killed, so that the
#: Lease is released before the kubelet's SIGKILL. Released, the standby takes over in one retry
#: period; killed before the release, the Lease would have to expire (15 s), and a replacement Pod
#: started meanwhile may win it instead.
GRACE_VARIABLE, DEFAULT_GRACE_S = "RLTRAINER_TERMINATION_GRACE_S", 30.0
#: A release is a read and a replace, each bounded by LEASE_CALL_TIMEOUT_S; one second to spare.
RELEASE_MARGIN_S = 2 * LEASE_CALL_TIMEOUT_S + 1


class LeadingEnded(Exception):  # noqa: N818 - not an error: how leading ends
    """How ``lead`` ends: the client's election stops renewing when its callback raises."""


class _Health(BaseHTTPRequestHandler):
    """A follower is alive (``/healthz``) and ready (``/readyz``) to take over."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path.startswith(("/healthz", "/readyz")) else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def liveness_address(command: list[str]) -> tuple[str, int] | None:
    """The ``--liveness=http://HOST:PORT/...`` address of a ``kopf run`` command, if it has one
    (the last one given, as kopf reads it: the chart's arguments follow the image's)."""
    for arg in reversed(command):
        if arg.startswith("--liveness="):
            url = urllib.parse.urlsplit(arg.split("=", 1)[1])
            if url.hostname and url.port:
                return url.hostname, url.port
    return None


def readiness_address() -> tuple[str, int] | None:
    """Where the operator serves ``/readyz`` (``Settings.readiness_port``), if it does."""
    port = os.environ.get("RLTRAINER_OPERATOR_READINESS_PORT", "0")
    return ("", int(port)) if port.isdigit() and int(port) else None


class Candidate:
    """One replica: follows until it holds the Lease, then runs ``command`` while it holds it."""

    def __init__(
        self, command: list[str], lease: str, namespace: str, identity: str, api_client: Any = None
    ) -> None:
        self.command = command
        self.lease, self.namespace, self.identity = lease, namespace, identity
        self.api_client = api_client  # the kubernetes client's (None: its default configuration)
        self.child: subprocess.Popen | None = None
        self.exit_code = 1
        self._health: list[ThreadingHTTPServer] = []
        # SIGTERM may come between winning the Lease and starting the operator (lead() runs in
        # the election's thread): once stopping, no operator is started.
        self._starting = threading.Lock()
        self.stopping = False

    # --- the follower's liveness and readiness ---------------------------------------------------
    def serve_health(self) -> None:
        for address in (liveness_address(self.command), readiness_address()):
            if address is not None:
                server = ThreadingHTTPServer(address, _Health)
                threading.Thread(target=server.serve_forever, daemon=True).start()
                self._health.append(server)

    def stop_health(self) -> None:
        for server in self._health:
            server.shutdown()
            server.server_close()  # the operator's own endpoints take the ports
        self._health = []

    # --- leading ----------------------------------------------------------------------------------
    def lead(self) -> None:
        """Run the operator; returns (raising) when it ends, which stops the renewals."""
        logger.info("%s holds Lease %s/%s: starting the operator", self.identity, self.namespace, self.lease)
        with self._starting:
            if self.stopping:
                raise LeadingEnded("stopping (SIGTERM): the operator is not started")
            self.stop_health()
            self.child = subprocess.Popen(self.command)
        self.exit_code = self.child.wait()
        raise LeadingEnded(f"the operator ended with status {self.exit_code}")

    def stopped_leading(self) -> None:
        """Renewals stopped (lost past the deadline, or the operator ended): no acting after this."""
        child = self.child
        if child is not None and child.poll() is None:
            logger.error(
                "%s lost Lease %s/%s: stopping the operator now", self.identity, self.namespace, self.lease
            )
            child.kill()  # before the Lease can expire for the others: no graceful overlap
            child.wait()
        else:
            self.release()
        os._exit(self.exit_code if child is not None and child.returncode == 0 else 1)

    def stop_starting(self) -> subprocess.Popen | None:
        """No operator is started from now on; the one started already, if any."""
        with self._starting:
            self.stopping = True
            return self.child

    def release(self) -> None:
        """Give the Lease up if this replica holds it (the operator ended, or SIGTERM): the others
        need not wait it out."""
        import kubernetes

        api = kubernetes.client.CoordinationV1Api(self.api_client)
        try:
            bounded = _BoundedCalls(api, LEASE_CALL_TIMEOUT_S)
            lease = bounded.read_namespaced_lease(self.lease, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                bounded.replace_namespaced_lease(self.lease, self.namespace, lease)
                logger.info("%s released Lease %s/%s", self.identity, self.namespace, self.lease)
        except Exception as err:  # noqa: BLE001 - it expires by itself anyway
            logger.info("could not release Lease %s/%s: %s", self.namespace, self.lease, err)

    def run(self) -> None:
        from kubernetes.leaderelection import electionconfig

        config = electionconfig.Config(
            bounded_lease_lock(self.lease, self.namespace, self.identity),
            LEASE_DURATION_S,
            RENEW_DEADLINE_S,
            RETRY_PERIOD_S,
            self.lead,
            self.stopped_leading,
        )
        self.serve_health()
        logger.info("%s waits for Lease %s/%s", self.identity, self.namespace, self.lease)
        _election(config).run()


def _election(config: Any) -> Any:
    """The client's ``LeaderElection`` for ``config``, renewing as client-go does."""
    from kubernetes.leaderelection import leaderelection

    class Election(leaderelection.LeaderElection):
        """The client's election with client-go's renew deadline: counted from the last renewal
        that went through (the client's own restarts it after each retry period, so a leader
        could act on until 12 s plus a call in flight had passed, too close to the 15 s Lease)."""

        def run_onstarted_leading(self, leading_failed: threading.Event) -> None:
            """The client's, with the normal end said as such: the client logs every end of its
            callback as an error with a traceback ("onstarted_leading raised an exception")."""
            try:
                self.election_config.onstarted_leading()
            except LeadingEnded as ended:
                logger.info("%s: renewals stop", ended)
            except Exception:
                logger.exception("the operator could not be run: renewals stop")
            leading_failed.set()

        def renew_loop(self, leading_failed: threading.Event | None = None) -> None:
            renewed = time.monotonic()
            while leading_failed is None or not leading_failed.is_set():
                if self.try_acquire_or_renew():
                    renewed = time.monotonic()
                elif time.monotonic() + RETRY_PERIOD_S - renewed >= RENEW_DEADLINE_S:
                    return  # no try may start past the deadline; run() calls stopped_leading
                time.sleep(RETRY_PERIOD_S)

    return Election(config)


def bounded_lease_lock(name: str, namespace: str, identity: str) -> Any:
    """The kubernetes client's ``LeaseLock`` with every call bounded (``LEASE_CALL_TIMEOUT_S``, one
    attempt) and a transport failure (the API server down or silent) counted as a failed try, as
    client-go counts it. The client's own lock catches only API errors: a refused connection
    would end the elector with a traceback (a follower's Pod restarted for an API server restart)
    and skip ``stopped_leading`` (a leader's operator left running)."""
    import kubernetes
    import urllib3
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class _Unreachable:
        """What ``get`` returns for a failed read: the elector logs its ``reason``."""

        body = None

        def __init__(self, err: Exception) -> None:
            self.reason = f"{type(err).__name__}: {err}"

    class BoundedLeaseLock(LeaseLock):
        refusal_said_at = -REFUSAL_LOG_INTERVAL_S

        def get(self, name: str, namespace: str) -> tuple[bool, Any]:
            try:
                found, record = super().get(name, namespace)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                return False, _Unreachable(err)
            if not found and getattr(record, "status", None) in (401, 403):
                self._say_refused(record)
            return found, record

        def _say_refused(self, err: Any) -> None:
            """The cause in one line a minute, not the client's line every retry period."""
            if time.monotonic() - self.refusal_said_at < REFUSAL_LOG_INTERVAL_S:
                return
            self.refusal_said_at = time.monotonic()
            what = (
                "refuses this replica's credentials (401): its ServiceAccount's token is no longer "
                "accepted (the ServiceAccount deleted, or the token revoked)"
                if err.status == 401
                else f"forbids this replica to read Lease {namespace}/{name} (403): the chart's "
                "leader-election Role or RoleBinding is missing or changed"
            )
            logger.error("cannot lead: the API server %s; retrying every %d s", what, RETRY_PERIOD_S)

        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            try:
                return super().create(name, namespace, election_record)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                logger.info("could not create Lease %s/%s: %s", namespace, name, err)
                return False

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            try:
                return super().update(name, namespace, updated_record)
            except (urllib3.exceptions.HTTPError, OSError) as err:
                logger.info("could not renew Lease %s/%s: %s", namespace, name, err)
                return False

    configuration = kubernetes.client.Configuration.get_default_copy()
    configuration.retries = False
    api = kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(configuration))
    lock = BoundedLeaseLock(name, namespace, identity)
    lock.api_instance = _BoundedCalls(api, LEASE_CALL_TIMEOUT_S)
    return lock


class _BoundedCalls:
    """An API object whose every method call carries ``_request_timeout``."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api, self._timeout_s = api, timeout_s

    def __getattr__(self, name: str) -> Any:
        return functools.partial(getattr(self._api, name), _request_timeout=self._timeout_s)


class _JsonLines(logging.Formatter):
    """One JSON object a line, as kopf's ``--log-format=json`` writes them."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "message": record.getMessage(),
                "timestamp": self.formatTime(record),
                "severity": record.levelname.lower(),
                "logger": record.name,
            }
        )


def _configure_logging(json_lines: bool) -> None:
    """The elector logs as the operator does: JSON lines when kopf is asked for them."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        _JsonLines() if json_lines else logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def _load_kubernetes_config() -> None:
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)


def _namespace() -> str:
    configured = os.environ.get("POD_NAMESPACE")
    if configured:
        return configured
    in_cluster = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    if os.path.exists(in_cluster):
        with open(in_cluster) as found:
            return found.read().strip()
    return "default"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rltrainer_operator.leader_election", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the operator's command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the operator's command after --")
    _configure_logging(json_lines="--log-format=json" in command)
    if os.environ.get("RLTRAINER_LEADER_ELECTION", "true").lower() in ("false", "0", "no"):
        os.execvp(command[0], command)  # one replica: the operator alone, as before
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    lease = os.environ.get("RLTRAINER_LEADER_ELECTION_LEASE") or DEFAULT_LEASE
    _load_kubernetes_config()
    candidate = Candidate(command, lease, _namespace(), identity)
    # SIGTERM (the Pod deleted): stop the operator first, then go; the Lease is released.
    signal.signal(signal.SIGTERM, lambda *_: _terminate(candidate))
    candidate.run()
    return candidate.exit_code


def _terminate(candidate: Candidate) -> None:
    """SIGTERM (the Pod deleted): stop the operator, if one runs, then release the Lease if this
    replica holds it: also when the operator has already ended (a signal to the whole process
    group reaches it too) and when it was not started yet (the Lease won a moment before)."""
    child = candidate.stop_starting()
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=stop_wait_s())
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    candidate.release()  # a read, and for a follower nothing more
    os._exit(0)


def stop_wait_s() -> float:
    """How long the operator may take to stop on SIGTERM: the grace period less the release's
    time (at least 1 s)."""
    raw = os.environ.get(GRACE_VARIABLE, "")
    try:
        grace = float(raw) if raw else DEFAULT_GRACE_S
    except ValueError:
        logger.warning("%s=%r is not a number of seconds: taking %s", GRACE_VARIABLE, raw, DEFAULT_GRACE_S)
        grace = DEFAULT_GRACE_S
    return max(1.0, grace - RELEASE_MARGIN_S)


if __name__ == "__main__":
    sys.exit(main())
