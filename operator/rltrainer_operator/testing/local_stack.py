"""The whole platform on one machine: Kubernetes API stand-in, local KubeRay and S3 (moto).

``LocalStack`` starts, on 127.0.0.1, a ``KubeAPIServer`` with the RLExperiment and RayCluster
resources declared (validated against their CRDs when the repository's copies are present),
``LocalKubeRay`` playing KubeRay against it, and optionally moto's S3 server with a bucket. It
writes a kubeconfig, so the operator (``kopf run ... -m rltrainer_operator.handlers``) and any
Kubernetes client can connect as to a cluster. The command line runs it until interrupted::

    python -m rltrainer_operator.testing.local_stack up --kubeconfig /tmp/rlx/kubeconfig \\
        --s3-bucket rl-checkpoints --env-file /tmp/rlx/env

The env file holds ``KUBECONFIG`` and the S3 endpoint and (fake) credentials, to ``source``.
"""

from __future__ import annotations

import argparse
import base64
import logging
import shlex
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from rltrainer_operator.testing.kapi import RAYCLUSTERS, RLX, KubeAPIServer
from rltrainer_operator.testing.local_kuberay import MERGE_PATCH, LocalKubeRay

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


def declare_resources(api: Any) -> None:
    """What installing the CRDs (ours and KubeRay's) does; writes are validated when possible."""
    validate = {}
    try:
        from rltrainer_operator.testing.schema import validator_for

        if RLX_CRD.exists():
            validate[RLX] = validator_for(str(RLX_CRD), "v1alpha1")
        if RAYCLUSTER_CRD.exists():
            validate[RAYCLUSTERS] = validator_for(str(RAYCLUSTER_CRD), "v1")
    except ImportError:  # jsonschema is a dev dependency
        pass
    api.declare(RLX, "RLExperiment", shortnames=("rlx",), validator=validate.get(RLX))
    api.declare(RAYCLUSTERS, "RayCluster", validator=validate.get(RAYCLUSTERS))
    api.declare("v1/secrets", "Secret", status=False)
    api.declare("v1/configmaps", "ConfigMap", status=False)


def kubeconfig(url: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": url}}],
        "users": [{"name": "local", "user": {"token": "local"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
        "current-context": "local",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalStack:
    """API stand-in + local KubeRay (+ moto S3 when ``s3_bucket`` is given); a context manager.

    Attributes once started: ``api`` (the ``KubeAPIServer``), ``api_client`` (a kubernetes
    ``ApiClient`` on it), ``kuberay`` (the ``LocalKubeRay``), ``s3_endpoint`` (or None).
    ``kuberay_options`` go to ``LocalKubeRay``.
    """

    def __init__(self, s3_bucket: str | None = None, **kuberay_options: Any) -> None:
        self.s3_bucket = s3_bucket
        self.kuberay_options = kuberay_options
        self.api: KubeAPIServer | None = None
        self.api_client: kubernetes.client.ApiClient | None = None
        self.kuberay: LocalKubeRay | None = None
        self.s3_endpoint: str | None = None
        self._moto: Any = None

    def start(self) -> LocalStack:
        try:
            if self.s3_bucket:
                self._start_s3()
            self.api = KubeAPIServer(declare_resources).start()
            self.api_client = kubernetes.client.ApiClient(kubernetes.client.Configuration(host=self.api.url))
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

    def env(self) -> dict[str, str]:
        """Variables for a shell (or the operator) to use this stack's S3."""
        if self.s3_endpoint is None:
            return {}
        return {"AWS_ENDPOINT_URL": self.s3_endpoint, "AWS_DEFAULT_REGION": REGION, **FAKE_CREDENTIALS}

    def write_kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig(self.api.url)))
        return path

    def stop(self) -> None:
        if self.kuberay is not None:
            self.kuberay.close()
        if self.api_client is not None:
            self.api_client.close()
        if self.api is not None:
            self.api.stop()
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
        description="The platform on one machine: Kubernetes API stand-in, local KubeRay, S3 (moto).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="run the API, a local KubeRay and S3 until interrupted")
    up.add_argument("--kubeconfig", required=True, help="write the kubeconfig for the API here")
    up.add_argument("--s3-bucket", help="also serve S3 (moto) on 127.0.0.1 with this bucket")
    up.add_argument("--env-file", help="write KUBECONFIG and the S3 variables here, to source")
    up.add_argument("--advertise-gpus", action="store_true", help="advertise num-gpus as given")
    up.add_argument("--keep-files", action="store_true", help="keep Ray's logs after clusters go")
    up.add_argument("-v", "--verbose", action="store_true")
    apply = commands.add_parser("apply", help="create or update RLExperiments and Secrets from YAML")
    apply.add_argument("-f", "--filename", required=True)
    apply.add_argument("-n", "--namespace", default="default")
    get = commands.add_parser("get", help="list RLExperiments: phase, iteration, return, restarts")
    get.add_argument("name", nargs="?", help="only this experiment")
    get.add_argument("-n", "--namespace", default="default")
    get.add_argument("--field", help="print only this status field of NAME (e.g. lastCheckpoint)")
    get.add_argument("-w", "--watch", action="store_true", help="print changes until every one finishes")
    kill = commands.add_parser("kill", help="SIGKILL a local Ray pod (a crash), found by its name prefix")
    kill.add_argument("pod", help="a pod name or prefix, e.g. rlx-ppo-cartpole-rollouts-worker or rlx-x-head")
    kill.add_argument("-n", "--namespace", default="default")
    args = parser.parse_args(argv)
    return {"up": _up, "apply": _apply, "get": _get, "kill": _kill}[args.command](args)


def _up(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("rltrainer_operator.testing").setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    options = {"advertise_gpus": args.advertise_gpus, "keep_files": args.keep_files}
    with LocalStack(s3_bucket=args.s3_bucket, **options) as stack:
        config = stack.write_kubeconfig(args.kubeconfig)
        variables = {"KUBECONFIG": str(config.resolve()), **stack.env()}
        if args.env_file:
            Path(args.env_file).write_text(
                "".join(f"export {key}={shlex.quote(value)}\n" for key, value in variables.items())
            )
        print(f"Kubernetes API: {stack.api.url} (kubeconfig {config})", flush=True)
        if stack.s3_endpoint:
            print(f"S3: {stack.s3_endpoint} (bucket {args.s3_bucket})", flush=True)
        print(f"local KubeRay files: {stack.kuberay.root}", flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        stop.wait()
        print("stopping: deleting every local Ray cluster", flush=True)
    return 0


def _clients() -> tuple[Any, Any]:
    kubernetes.config.load_kube_config()
    return kubernetes.client.CustomObjectsApi(), kubernetes.client.CoreV1Api()


def _apply(args: argparse.Namespace) -> int:
    """``kubectl apply -f`` for the two kinds the journey needs: create, or merge-patch what exists."""
    custom, core = _clients()
    with open(args.filename) as stream:
        documents = [doc for doc in yaml.safe_load_all(stream) if doc]
    for doc in documents:
        namespace = doc.setdefault("metadata", {}).setdefault("namespace", args.namespace)
        name, kind = doc["metadata"]["name"], doc.get("kind")
        if kind == "RLExperiment":
            target = ("rltrainer.io", "v1alpha1", namespace, "rlexperiments")
            try:
                custom.create_namespaced_custom_object(*target, doc)
                action = "created"
            except kubernetes.client.ApiException as err:
                if err.status != 409:
                    raise
                custom.patch_namespaced_custom_object(
                    *target, name, {"spec": doc["spec"]}, _content_type=MERGE_PATCH
                )
                action = "configured"
        elif kind == "Secret":
            data = dict(doc.get("data") or {})
            for key, value in (doc.get("stringData") or {}).items():  # as the API server does
                data[key] = base64.b64encode(str(value).encode()).decode()
            body = {"metadata": {"name": name, "namespace": namespace}, "data": data}
            try:
                core.create_namespaced_secret(namespace, body)
                action = "created"
            except kubernetes.client.ApiException as err:
                if err.status != 409:
                    raise
                core.patch_namespaced_secret(name, namespace, body, _content_type=MERGE_PATCH)
                action = "configured"
        else:
            raise SystemExit(f"apply: only RLExperiment and Secret are supported here, not {kind}")
        print(f"{kind.lower()}/{name} {action}")
    return 0


def _get(args: argparse.Namespace) -> int:
    custom, _ = _clients()
    if args.field:
        if not args.name:
            raise SystemExit("get: --field needs an experiment NAME")
        body = custom.get_namespaced_custom_object(
            "rltrainer.io", "v1alpha1", args.namespace, "rlexperiments", args.name
        )
        print((body.get("status") or {}).get(args.field) or "")
        return 0
    print(
        f"{'NAME':<24} {'PHASE':<12} {'ITER':>5} {'RETURN':>8} {'RESTARTS':>8} {'RUNNER RESTARTS':>15}"
        "  MESSAGE"
    )
    shown: dict[str, str] = {}
    while True:
        items = custom.list_namespaced_custom_object(
            "rltrainer.io", "v1alpha1", args.namespace, "rlexperiments"
        )
        items = [i for i in items["items"] if args.name in (None, i["metadata"]["name"])]
        for item in items:
            name = item["metadata"]["name"]
            line = _row(name, item.get("status") or {})
            if shown.get(name) != line:
                print(line, flush=True)
                shown[name] = line
        phases = [(i.get("status") or {}).get("phase") for i in items]
        if not args.watch or (items and all(p in ("Succeeded", "Failed") for p in phases)):
            return 0
        time.sleep(2)


def _row(name: str, status: dict[str, Any]) -> str:
    value = status.get("episodeReturnMean")
    return (
        f"{name:<24} {status.get('phase', ''):<12} {status.get('iteration') or '-':>5} "
        f"{'-' if value is None else f'{value:.1f}':>8} {status.get('restarts', 0):>8} "
        f"{status.get('envRunnerRestarts') or 0:>15}  {status.get('message') or ''}"
    )


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
