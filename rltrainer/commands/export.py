"""``rltrainer export``: write a checkpoint's policy as an ONNX or TorchScript model."""

from __future__ import annotations

import argparse
from typing import Any

from rltrainer.commands.common import check_not_trial_dir, policy_id_of
from rltrainer.errors import ConfigError


def add_parser(commands: Any) -> None:
    """``rltrainer export CHECKPOINT --out DIR``."""
    export = commands.add_parser(
        "export",
        help="write a checkpoint's policy as an ONNX or TorchScript model",
        description="Write a checkpoint's deterministic policy (observation filter, model, action "
        "rescaling) as model.onnx or model.pt, with export.json describing its inputs and outputs.",
    )
    export.add_argument("checkpoint", help="a checkpoint folder or s3:// URI")
    export.add_argument("--format", choices=("onnx", "torchscript"), default="onnx", help="default: onnx")
    export.add_argument("--out", required=True, metavar="DIR", help="the folder to write into")
    export.add_argument("--opset", type=int, default=None, help="ONNX opset (default 18)")
    export.add_argument(
        "--policy-id", default=None, metavar="ID", help="the policy of a multi-agent checkpoint to export"
    )
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from rltrainer.evaluation import load_checkpoint
    from rltrainer.export import export_policy

    check_not_trial_dir(args.checkpoint)
    if args.opset is not None and args.format != "onnx":
        raise ConfigError("--opset is an ONNX setting: use it with --format onnx")
    algo = load_checkpoint(args.checkpoint)
    try:
        runner = algo.env_runner_group.local_worker()
        if algo._multi_agent:  # one policy per export
            pid = policy_id_of(args.policy_id, list(runner.policy_map))
            policy, observation_filter = runner.get_policy(pid), runner.filter.filters[pid]
        else:
            policy, observation_filter = runner.policy, runner.filter
        path = export_policy(
            policy, observation_filter, args.out, args.format, opset=args.opset, source=args.checkpoint
        )
    finally:
        algo.stop()
    print(
        f"exported {type(algo).__name__} policy to {path} (inputs and outputs: {path.parent / 'export.json'})"
    )
    return 0
