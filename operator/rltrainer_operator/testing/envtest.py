"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager.

What controller-runtime's *envtest* gives Go operators, for ours: the real API server (CRD
structural schemas, CEL rules and defaulting, the status subresource, server-side apply, watches,
RBAC with a real authorizer, admission) and the real garbage collector and namespace controller.
No kubelet, scheduler or container runtime: objects are stored and reconciled, pods never run.

The binaries come from ``KUBEBUILDER_ASSETS`` (a folder with ``etcd``, ``kube-apiserver``,
``kube-controller-manager`` and ``kubectl``: envtest's layout, ``setup-envtest use 1.32 -p path``),
else from the repository's neighbour ``../shared/envtest`` (its ``setup`` unpacks them into a cache).
``find_assets()`` returns None when neither exists; tests then skip with ``MISSING_ASSETS``.

``ControlPlane`` starts the three on free 127.0.0.1 ports in a temporary folder (etcd's data on
``/dev/shm`` where there is one: etcd 3.4 fsyncs every write), with TLS, RBAC and an audit log of
every request (``audit_events()``: what tests count requests and check for 403s with), writes an
admin kubeconfig, and stops exactly the processes it started. It also mints kubeconfigs for
service accounts (``service_account_kubeconfig``: a real token from the TokenRequest API), so a
test can run the operator with the identity the Helm chart gives it. The command line runs one
until interrupted::

    python -m rltrainer_operator.testing.envtest up --kubeconfig /tmp/rlx/kubeconfig
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import datetime
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
#: The project's neighbour with the control plane's binaries (``setup`` unpacks and prints a folder).
SHARED_ENVTEST = REPO.parent / "shared" / "envtest"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
MISSING_ASSETS = (
    "no Kubernetes control-plane binaries: set KUBEBUILDER_ASSETS to a folder with etcd, "
    "kube-apiserver, kube-controller-manager and kubectl (e.g. `setup-envtest use 1.32 -p path`), "
    f"or provide {SHARED_ENVTEST}"
)
#: This etcd is 3.4, which lacks watch progress requests (the API server's defaults need them).
FEATURE_GATES = "ConsistentListFromCache=false,WatchList=false"
#: The Services' cluster IPs (the API server's --service-cluster-ip-range); the ``kubernetes``
#: Service gets its first address.
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
#: Every request's metadata (user, verb, resource, response code), never a body: no secrets.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}


def find_assets() -> Path | None:
    """The folder with the control plane's binaries, or None when there is none to be had."""
    configured = os.environ.get("KUBEBUILDER_ASSETS")
    if configured:
        folder = Path(configured)
        return folder if all((folder / name).exists() for name in BINARIES[:3]) else None
    setup = SHARED_ENVTEST / "setup"
    if not setup.exists():
        return None
    done = subprocess.run([str(setup)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{setup} failed: {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ControlPlaneError(RuntimeError):
    """A control-plane process did not come up; the message ends with its log."""


class Processes:
    """Named child processes of a test harness, each logging to ``<logs>/<name>.log``.

    ``new_session``: each in a process group of its own, so a Ctrl-C to the test run reaches the
    harness, which then stops them in order (a container runtime must outlive its kubelet).
    Either way a child gets SIGTERM when the process that started it dies."""

    def __init__(self, logs: Path, *, new_session: bool = False) -> None:
        self.logs = logs
        self.new_session = new_session
        self._procs: dict[str, subprocess.Popen] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._procs

    def launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``argv`` as ``name``; ``env``: variables on top of this process's environment."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it open
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else {**os.environ, **env},
                preexec_fn=_die_with_parent,
                start_new_session=self.new_session,
            )
        finally:
            log.close()
        self._procs[name] = proc
        return proc

    def pid(self, name: str) -> int | None:
        """The process id of ``name`` while it runs, else None."""
        proc = self._procs.get(name)
        return None if proc is None or proc.poll() is not None else proc.pid

    def exit_code(self, name: str) -> int | None:
        """The exit status of ``name`` when it has ended by itself, else None."""
        proc = self._procs.get(name)
        return None if proc is None else proc.poll()

    def end(self, name: str) -> None:
        """SIGTERM, then SIGKILL after 15 s; nothing when it is not running."""
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def wait(self, name: str, ready: Any, timeout_s: float) -> None:
        """Until ``ready()``; ``ControlPlaneError`` with the log's tail when it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._procs[name].poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited ({self._procs[name].returncode}):\n{self.log_tail(name)}"
                )
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} not ready after {timeout_s:.0f}s:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on this machine; a context manager.

    Attributes once started: ``url`` (the API server), ``kubeconfig`` (an admin kubeconfig file,
    in ``system:masters``), ``kubectl`` (the binary), ``root`` (certificates, logs, kubeconfigs).

    ``address``: where the API server listens and what it advertises, 127.0.0.1 by default. A test
    cluster's pod network gateway (``testing.cluster_network``) makes it a cluster's API server
    that Pods reach through the ``kubernetes`` Service, as in-cluster clients do: its endpoints
    are then kept by the API server (the lease reconciler), and its serving certificate names that
    address and the Service's (``KUBERNETES_SERVICE_IP``, ``kubernetes.default.svc``).
    """

    def __init__(
        self,
        assets: Path,
        root: Path | None = None,
        start_timeout_s: float = 120.0,
        address: str = "127.0.0.1",
    ) -> None:
        self.assets = Path(assets)
        self.address = address
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="envtest-") if root is None else root)
        self.start_timeout_s = start_timeout_s
        self.kubectl = self.assets / "kubectl"
        self.kubeconfig = self.root / "kubeconfig"
        self.audit_log = self.root / "audit.log"
        self.url = ""
        self._procs = Processes(self.root)
        self._etcd_dir: Path | None = None
        self._etcd_ports: tuple[int, int] | None = None
        self._apiserver_port: int | None = None
        self._pki = self.root / "pki"

    # ---------------------------------------------------------------------------------- life cycle

    def start(self) -> ControlPlane:
        try:
            self._pki.mkdir(parents=True, exist_ok=True)
            _write_pki(self._pki, [self.address, KUBERNETES_SERVICE_IP])
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop what this object started (controller-manager, API server, etcd), then its files."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            self._procs.end(name)
        if self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def outage(self, *, etcd: bool = False) -> Iterator[None]:
        """The API server stopped for the block (SIGTERM, as a control-plane upgrade or a crashed
        static Pod stops it), and etcd too with ``etcd`` (its data kept, as on a restarted machine);
        then started again at the same addresses, with the same certificates and data. Every
        client (the kubelets, controllers, operators) sees connections refused meanwhile and must
        reconnect by itself. Returns once the API server answers ``/readyz`` again."""
        stopped = ("kube-apiserver", "etcd") if etcd else ("kube-apiserver",)
        for name in stopped:
            self._procs.end(name)
        try:
            yield
        finally:
            if etcd:
                self._start_etcd()
            self._start_apiserver()

    # ------------------------------------------------------------------------------------ processes

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        return self._procs.launch(name, [str(self.assets / name), *args])

    def _wait(self, name: str, ready: Any) -> None:
        self._procs.wait(name, ready, self.start_timeout_s)

    def log_tail(self, name: str, lines: int = 20) -> str:
        return self._procs.log_tail(name, lines)

    def _start_etcd(self) -> None:
        """etcd on free ports with its data in a new folder; again on the same ones (a restart)."""
        if self._etcd_dir is None:
            shm = Path("/dev/shm")
            base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.root
            self._etcd_dir = Path(tempfile.mkdtemp(prefix="envtest-etcd-", dir=base))
            self._etcd_ports = free_port(), free_port()
        client, peer = self._etcd_ports
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._launch(
            "etcd",
            [
                f"--data-dir={self._etcd_dir}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--logger=zap",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: b'"health":"true"' in _get(f"{self.etcd_url}/health"))

    def _start_apiserver(self) -> None:
        """The API server on a free port; again on the same one (a restart)."""
        port = self._apiserver_port = self._apiserver_port or free_port()
        self.url = f"https://{self.address}:{port}"
        pki = self._pki
        policy = self.root / "audit-policy.yaml"
        # On loopback no endpoints can be kept for the `kubernetes` Service (the API server
        # refuses a loopback endpoint); on a pod network's gateway the lease reconciler keeps them.
        reconciler = "none" if ipaddress.ip_address(self.address).is_loopback else "lease"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self._launch(
            "kube-apiserver",
            [
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={port}",
                f"--etcd-servers={self.etcd_url}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--endpoint-reconciler-type={reconciler}",
                "--allow-privileged=true",
                # A node's kubelet (testing.node) listens on a loopback address, its Hostname.
                "--kubelet-preferred-address-types=Hostname,InternalIP",
                "--profiling=false",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                f"--feature-gates={FEATURE_GATES}",
                "--v=0",
            ],
        )
        self._write_kubeconfig(self.kubeconfig, "admin", cert=pki / "admin.crt", key=pki / "admin.key")
        self._wait("kube-apiserver", lambda: self._admin_get("/readyz") == b"ok")

    def _start_controller_manager(self) -> None:
        pki = self._pki
        kcm_config = self.root / "kube-controller-manager.kubeconfig"
        self._write_kubeconfig(
            kcm_config, "system:kube-controller-manager", cert=pki / "kcm.crt", key=pki / "kcm.key"
        )
        port = free_port()
        self._launch(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.root / 'kcm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                # The garbage collector and the namespace controller are what tests need (and
                # service accounts, for tokens); with a node (testing.node), Deployments run
                # (the chart's operator) and Pods mount their service-account token with the
                # cluster's CA (kube-root-ca.crt), a Ready node loses its not-ready taint, and
                # Services get their EndpointSlices (what cluster DNS answers for a headless
                # Service, such as KubeRay's head Service). A node that stops answering is
                # tainted and its Pods evicted after their toleration (taint-eviction), and once
                # it is deleted or tainted out-of-service its Pods go (the Pod garbage collector),
                # as in any cluster. A quick resync keeps deletions prompt.
                "--controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token,"
                "deployment,replicaset,root-ca-cert-publisher,nodelifecycle,endpoint,endpointslice,"
                "endpointslicemirroring,taint-eviction-controller,pod-garbage-collector-controller",
                "--namespace-sync-period=10s",
                "--v=0",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        self._wait(
            "kube-controller-manager", lambda: _get(f"https://127.0.0.1:{port}/healthz", insecure) == b"ok"
        )

    # -------------------------------------------------------------------------------- kubeconfigs

    def _write_kubeconfig(
        self, path: Path, user: str, *, cert: Path | None = None, key: Path | None = None, token: str = ""
    ) -> Path:
        credentials: dict[str, str] = {"token": token}
        if cert is not None and key is not None:
            credentials = {
                "client-certificate-data": _b64(cert.read_bytes()),
                "client-key-data": _b64(key.read_bytes()),
            }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64((self._pki / "ca.crt").read_bytes()),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path | None = None) -> Path:
        """A kubeconfig acting as ``system:serviceaccount:<namespace>:<name>`` (a real bound token,
        valid for a day). The service account must exist."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        }
        answer = self.kubectl_json(
            "create",
            "--raw",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            "-f",
            "-",
            stdin=json.dumps(request),
        )
        path = path or self.root / f"sa-{namespace}-{name}.kubeconfig"
        return self._write_kubeconfig(
            path, f"system:serviceaccount:{namespace}:{name}", token=answer["status"]["token"]
        )

    def cluster_role_kubeconfig(self, namespace: str, account: str, role: dict[str, Any], path: Path) -> Path:
        """A component's identity as its manifests give it: the ServiceAccount ``namespace/account``
        (and its namespace), the ClusterRole ``role`` bound to it by a ClusterRoleBinding of the
        role's name, and a kubeconfig acting as that account (``service_account_kubeconfig``)."""
        name = role["metadata"]["name"]
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": namespace},
            },
            role,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            },
        ]
        self.apply_objects(objects)
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.service_account_kubeconfig(namespace, account, path)

    def serving_certificate(self, folder: Path, name: str, addresses: list[str]) -> str:
        """A serving certificate (``folder/tls.crt``, ``tls.key``) for a server the API server
        calls (a webhook) on ``addresses``, signed by the plane's CA; returns that CA's PEM
        bundle, base64-encoded as a webhook's ``caBundle`` is."""
        _serving_certificate(self._pki, Path(folder), name, addresses)
        return _b64((self._pki / "ca.crt").read_bytes())

    # ------------------------------------------------------------------------------------- helpers

    def kubectl_argv(self, *args: str, kubeconfig: Path | None = None) -> list[str]:
        """The command line of ``kubectl ARGS`` against this control plane (as admin unless
        ``kubeconfig`` is given): for a kubectl that runs on, a watch or ``logs -f``."""
        return [str(self.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]

    def kubectl_run(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        """``kubectl ARGS`` against this control plane (as admin unless ``kubeconfig`` is given)."""
        done = subprocess.run(
            self.kubectl_argv(*args, kubeconfig=kubeconfig),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done

    def install_crds(self, *paths: Path, timeout_s: float = 60.0) -> None:
        """``kubectl apply --server-side`` the CRD files, then wait until each is Established.

        The names come from apply's own output and ``kubectl wait`` watches the conditions: KubeRay's
        CRDs are 4 MB of YAML, which parsing here and polling back as JSON cost 11 CPU-seconds more."""
        args = [arg for path in paths for arg in ("-f", str(path))]
        names = self.kubectl_run("apply", "--server-side", "-o", "name", *args).stdout.split()
        waited = self.kubectl_run(
            "wait", "--for=condition=Established", f"--timeout={timeout_s:.0f}s", *names, check=False
        )
        if waited.returncode != 0:
            why = waited.stderr.strip() or waited.stdout.strip()
            raise ControlPlaneError(f"CRDs not Established after {timeout_s:.0f}s: {why}")

    def apply_objects(self, objects: list[dict[str, Any]], *, server_side: bool = False) -> None:
        """``kubectl apply`` of the objects (as one ``v1`` List) as admin."""
        stdin = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.kubectl_run("apply", *(["--server-side"] if server_side else []), "-f", "-", stdin=stdin)

    def kubectl_json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self.kubectl_run(*args, stdin=stdin).stdout)

    def audit_events(self) -> Iterator[dict[str, Any]]:
        """Every request the API server has finished so far (``ResponseComplete`` audit events)."""
        with contextlib.suppress(FileNotFoundError), self.audit_log.open() as lines:
            for line in lines:
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("stage") == "ResponseComplete":
                        yield event

    def _admin_get(self, path: str) -> bytes:
        context = ssl.create_default_context(cafile=str(self._pki / "ca.crt"))
        context.load_cert_chain(str(self._pki / "admin.crt"), str(self._pki / "admin.key"))
        return _get(self.url + path, context)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (a test run
    killed mid-way leaves no control plane behind). Linux's prctl(PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def try_lock(path: Path | str) -> Any | None:
    """An exclusive lock on the file ``path`` (made when missing, never through a link), held
    until the returned file is closed (or this process ends); None when another process holds it."""
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    lock = os.fdopen(descriptor, "r+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None
    return lock


def run_checked(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120.0) -> str:
    """``args``' standard output; ``ControlPlaneError`` with its standard error when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(
            f"{' '.join(args[:4])} ... failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return done.stdout


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers 200 (a health or readiness endpoint); False while it cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status == 200
    except OSError:
        return False


def _get(url: str, context: ssl.SSLContext | None = None) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=3, context=context) as response:
            return response.read().strip()
    except (OSError, urllib.error.URLError, ValueError):
        return b""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------------------------ certificates


def _key_pair(folder: Path, name: str) -> Any:
    """A new EC key, written to ``folder/<name>.key``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (folder / f"{name}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return key


def _subject(common_name: str, organization: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _certificate(
    folder: Path, name: str, key: Any, subject_name: Any, issuer: tuple[Any, Any] | None, **ext: Any
):
    """A certificate for ``key``, written to ``folder/<name>.crt``: a CA when ``issuer`` is None,
    else signed by ``issuer`` (its name and key); ``usage`` and ``sans`` as extensions."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject_name)
        .issuer_name(issuer[0] if issuer else subject_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if "usage" in ext:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ext["usage"]]), critical=False)
    if "sans" in ext:
        builder = builder.add_extension(x509.SubjectAlternativeName(ext["sans"]), critical=False)
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def _ip_sans(addresses: list[str]) -> list[Any]:
    from cryptography import x509

    return [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys(["127.0.0.1", *addresses])]


def _write_pki(folder: Path, addresses: list[str]) -> None:
    """A CA; the API server's serving certificate (127.0.0.1, ``addresses``, localhost and the
    ``kubernetes`` Service's names); client certificates for
    the admin (``system:masters``) and the controller-manager; the service-account key pair."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key = _key_pair(folder, "ca")
    ca_name = _subject("envtest-ca")
    _certificate(folder, "ca", ca_key, ca_name, None)
    ca = (ca_name, ca_key)
    sans = [
        *_ip_sans(addresses),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    _certificate(
        folder,
        "apiserver",
        _key_pair(folder, "apiserver"),
        _subject("kube-apiserver"),
        ca,
        usage=server,
        sans=sans,
    )
    _certificate(
        folder, "admin", _key_pair(folder, "admin"), _subject("admin", "system:masters"), ca, usage=client
    )
    _certificate(
        folder, "kcm", _key_pair(folder, "kcm"), _subject("system:kube-controller-manager"), ca, usage=client
    )
    sa_key = _key_pair(folder, "sa")
    (folder / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for path in folder.iterdir():
        path.chmod(0o600)


def _serving_certificate(pki: Path, folder: Path, name: str, addresses: list[str]) -> None:
    """``folder/tls.crt`` and ``tls.key``: a serving certificate for ``addresses`` signed by the
    CA of ``pki`` (controller-runtime's certificate folder layout)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    folder.mkdir(parents=True, exist_ok=True)
    key = _key_pair(folder, "tls")
    _certificate(
        folder,
        "tls",
        key,
        _subject(name),
        (ca_cert.subject, ca_key),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=_ip_sans(addresses),
    )
    for path in folder.iterdir():
        path.chmod(0o600)


# --------------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rltrainer_operator.testing.envtest",
        description="Run a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) "
        "on 127.0.0.1 until interrupted.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start it and write an admin kubeconfig")
    up.add_argument("--kubeconfig", required=True, help="write the admin kubeconfig here")
    args = parser.parse_args(argv)
    assets = find_assets()
    if assets is None:
        raise SystemExit(MISSING_ASSETS)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with ControlPlane(assets) as plane:
        target = Path(args.kubeconfig)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plane.kubeconfig, target)
        target.chmod(0o600)
        print(f"Kubernetes API: {plane.url} (kubeconfig {target}, kubectl {plane.kubectl})", flush=True)
        print("ready; Ctrl-C stops it", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
