"""``rltrainer serve``: a checkpoint's policy over HTTP (``rltrainer.offline.policy_server``)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rltrainer.cli_compat import port_number, positive_int
from rltrainer.commands.common import check_not_trial_dir, policy_id_of


def add_parser(commands: Any) -> None:
    """``rltrainer serve CHECKPOINT``."""
    serve = commands.add_parser(
        "serve",
        help="serve a checkpoint's policy over HTTP for inference (the external application API)",
        description="Serve a checkpoint's policy to PolicyClient applications (remote inference; "
        "logged actions and rewards are accepted and not learned from). Binds 127.0.0.1 unless --host "
        "says otherwise; any other address needs a bearer token (--token-env or --token-file).",
    )
    serve.add_argument("checkpoint", help="a checkpoint folder or s3:// URI")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=port_number, default=9900, help="default 9900 (0: any free port)")
    serve.add_argument("--explore", action="store_true", help="sample actions (default: greedy)")
    serve.add_argument(
        "--policy-id", default=None, metavar="ID", help="the policy of a multi-agent checkpoint to serve"
    )
    serve.add_argument(
        "--token-env",
        default="RLTRAINER_POLICY_SERVER_TOKEN",
        metavar="NAME",
        help="environment variable holding the bearer token (default RLTRAINER_POLICY_SERVER_TOKEN)",
    )
    serve.add_argument("--token-file", metavar="PATH", help="file holding the bearer token")
    serve.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=1 << 20,
        help="larger requests get 413 (default 1 MiB)",
    )
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rltrainer.offline.policy_server import InferenceServer
    from rltrainer.policy.policy import Policy

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check_not_trial_dir(args.checkpoint)
    policy = Policy.from_checkpoint(args.checkpoint)
    if isinstance(policy, dict):  # a multi-agent checkpoint: one policy per server
        policy = policy[policy_id_of(args.policy_id, list(policy))]
    server = InferenceServer(
        policy,
        policy.observation_filter,
        explore=args.explore,
        address=args.host,
        port=args.port,
        token_env=args.token_env,
        token_file=args.token_file,
        max_request_bytes=args.max_request_bytes,
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(f"serving the {policy.config.ALGORITHM} policy of {args.checkpoint} on {server.url}", flush=True)
    try:
        stopped.wait()
    finally:
        server.stop()
    return 0
