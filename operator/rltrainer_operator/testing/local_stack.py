"""The whole platform on one machine: a real Kubernetes control plane, a local KubeRay and S3 (moto).

``LocalStack`` starts, on 127.0.0.1, a real control plane (``envtest.ControlPlane``: etcd,
kube-apiserver, kube-controller-manager) with the RLExperiment CRD and KubeRay's RayCluster CRD
installed as users install them (``kubectl apply --server-side``), ``LocalKubeRay`` playing
KubeRay against it, and optionally moto's S3 server with a bucket. It writes an admin
kubeconfig, so the operator (``kopf run ... -m rltrainer_operator``), ``kubectl`` and any
Kubernetes client connect as to a cluster. The command line runs it until interrupted::

    python -m rltrainer_operator.testing.local_stack up --kubeconfig /tmp/rlx/kubeconfig \\
        --s3-bucket rl-checkpoints --env-file /tmp/rlx/env

The env file holds ``KUBECONFIG``, ``PATH`` with the control plane's ``kubectl`` first, and the
S3 endpoint and (fake) credentials, to ``source``. ``kill`` crashes a local "pod".
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import kubernetes

from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from rltrainer_operator.testing.local_kuberay import LocalKubeRay

REPO = Path(__file__).resolve().parents[3]
RLX_CRD = REPO / "crds" / "rltrainer.io_rlexperiments.yaml"
RAYCLUSTER_CRD = REPO / "tests" / "operator" / "data" / "kuberay" / "ray.io_rayclusters.yaml"
#: moto accepts any credentials; these are obviously fake.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIALOCALSTACK000000",
    "AWS_SECRET_ACCESS_KEY": "local-stack-fake-secret",
}
REGION = "us-east-1"

logger = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalStack:
    """Control plane + local KubeRay (+ moto S3 when ``s3_bucket`` is given); a context manager.

    Attributes once started: ``plane`` (the ``ControlPlane``: ``kubeconfig``, ``kubectl_run``),
    ``api_client`` (an admin kubernetes ``ApiClient``), ``kuberay`` (the ``LocalKubeRay``),
    ``s3_endpoint`` (or None). ``kuberay_options`` go to ``LocalKubeRay``.
    """

    def __init__(self, s3_bucket: str | None = None, **kuberay_options: Any) -> None:
        self.s3_bucket = s3_bucket
        self.kuberay_options = kuberay_options
        self.plane: ControlPlane | None = None
        self.api_client: kubernetes.client.ApiClient | None = None
        self.kuberay: LocalKubeRay | None = None
        self.s3_endpoint: str | None = None
        self._moto: Any = None

    def start(self) -> LocalStack:
        assets = find_assets()
        if assets is None:
            raise RuntimeError(MISSING_ASSETS)
        try:
            if self.s3_bucket:
                self._start_s3()
            self.plane = ControlPlane(assets).start()
            self.plane.install_crds(RAYCLUSTER_CRD, RLX_CRD)
            self.api_client = kubernetes.config.new_client_from_config(config_file=str(self.plane.kubeconfig))
            self.kuberay = LocalKubeRay(self.api_client, **self.kuberay_options).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_s3(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        port = _free_port()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self._moto.start()
        self.s3_endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=self.s3_endpoint, region_name=REGION, **_boto_credentials())
        s3.create_bucket(Bucket=self.s3_bucket)

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    def env(self) -> dict[str, str]:
        """Variables for a shell (or the operator): kubectl on PATH, and this stack's S3."""
        variables = {"PATH": f"{self.plane.assets}{os.pathsep}{os.environ.get('PATH', '')}"}
        if self.s3_endpoint is not None:
            variables.update(AWS_ENDPOINT_URL=self.s3_endpoint, AWS_DEFAULT_REGION=REGION, **FAKE_CREDENTIALS)
        return variables

    def write_kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.plane.kubeconfig, path)
        path.chmod(0o600)
        return path

    def stop(self) -> None:
        if self.kuberay is not None:
            self.kuberay.close()
        if self.api_client is not None:
            self.api_client.close()
        if self.plane is not None:
            self.plane.stop()
        if self._moto is not None:
            self._moto.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rltrainer_operator.testing.local_stack",
        description="The platform on one machine: a real Kubernetes control plane, local KubeRay, S3 (moto).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run the control plane, a local KubeRay and S3 until interrupted")
    up.add_argument("--kubeconfig", required=True, help="write the admin kubeconfig here")
    up.add_argument("--s3-bucket", help="also serve S3 (moto) on 127.0.0.1 with this bucket")
    up.add_argument(
        "--env-file", help="write KUBECONFIG, PATH (kubectl) and the S3 variables here, to source"
    )
    up.add_argument("--advertise-gpus", action="store_true", help="advertise num-gpus as given")
    up.add_argument("--keep-files", action="store_true", help="keep Ray's logs after clusters go")
    up.add_argument("-v", "--verbose", action="store_true")
    kill = commands.add_parser("kill", help="SIGKILL a local Ray pod (a crash), found by its name prefix")
    kill.add_argument("pod", help="a pod name or prefix, e.g. rlx-ppo-cartpole-rollouts-worker or rlx-x-head")
    kill.add_argument("-n", "--namespace", default="default")
    args = parser.parse_args(argv)
    return {"up": _up, "kill": _kill}[args.command](args)


def _up(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("rltrainer_operator.testing").setLevel(logging.INFO)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    options = {"advertise_gpus": args.advertise_gpus, "keep_files": args.keep_files}
    try:
        stack = LocalStack(s3_bucket=args.s3_bucket, **options).start()
    except RuntimeError as err:
        raise SystemExit(f"local_stack: {err}") from None
    try:
        config = stack.write_kubeconfig(args.kubeconfig)
        variables = {"KUBECONFIG": str(config.resolve()), **stack.env()}
        if args.env_file:
            Path(args.env_file).write_text(
                "".join(f"export {key}={shlex.quote(value)}\n" for key, value in variables.items())
            )
        print(
            f"Kubernetes API: {stack.plane.url} (kubeconfig {config}, kubectl {stack.plane.kubectl})",
            flush=True,
        )
        if stack.s3_endpoint:
            print(f"S3: {stack.s3_endpoint} (bucket {args.s3_bucket})", flush=True)
        print(f"local KubeRay files: {stack.kuberay.root}", flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        stop.wait()
        print("stopping: deleting every local Ray cluster, then the control plane", flush=True)
    finally:
        stack.stop()
    return 0


def _kill(args: argparse.Namespace) -> int:
    """SIGKILL every process of the local pod whose name starts with ``args.pod``."""
    from rltrainer_operator.testing.local_kuberay import _marked_processes, kill_pod

    markers = sorted(
        {
            marker
            for _pid, marker in _marked_processes()
            if marker.split("/")[1] == args.namespace and marker.split("/")[-1].startswith(args.pod)
        }
    )
    if not markers:
        print(f"no local pod named {args.pod}* in namespace {args.namespace}")
        return 1
    pids = kill_pod(markers[0])
    print(f"killed pod {markers[0].split('/')[-1]} ({len(pids)} processes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
