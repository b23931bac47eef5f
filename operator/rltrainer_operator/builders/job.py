"""The training driver's Ray job: an ``rltrainer train`` command built from the experiment.

The spec owns the cluster-shaped settings (env runners, learners, their resources, storage,
checkpointing); ``validation`` rejects those keys in ``spec.config``, so here they can simply
be laid over the user's config.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from rltrainer_operator.builders.raycluster import LEARNER_RESOURCE, ROLLOUT_RESOURCE
from rltrainer_operator.models import ExperimentSpec
from rltrainer_operator.settings import Settings
from rltrainer_operator.sweep import is_sweep


def storage_path(spec: ExperimentSpec, namespace: str) -> str:
    """``<checkpoint.uri>/<namespace>``: experiments of one namespace share a folder."""
    return f"{spec.checkpoint.uri.rstrip('/')}/{namespace}"


def experiment_uri(spec: ExperimentSpec, namespace: str, name: str) -> str:
    """Where the driver writes: checkpoints in trial folders, and ``progress.json``."""
    return f"{storage_path(spec, namespace)}/{name}"


def driver_config(spec: ExperimentSpec, settings: Settings) -> dict[str, Any]:
    """The algorithm config the driver runs: ``spec.config`` plus what the spec's fields set."""
    owned: dict[str, Any] = {
        "env_config": dict(spec.envConfig),
        "num_env_runners": spec.rollouts.replicas,
        "num_envs_per_env_runner": spec.rollouts.envsPerRunner,
        "num_cpus_per_env_runner": spec.rollouts.cpusPerRunner,
        "num_learners": spec.learners.replicas,
        "num_gpus_per_learner": spec.learners.gpusPerLearner,
        "num_cpus_per_learner": spec.learners.cpusPerLearner,
        "restart_failed_env_runners": spec.faultTolerance.restartFailedEnvRunners,
        "max_num_env_runner_restarts": spec.faultTolerance.maxEnvRunnerRestarts,
        "delay_between_env_runner_restarts_s": spec.faultTolerance.envRunnerRestartDelaySeconds,
        "restart_failed_learners": spec.faultTolerance.restartFailedLearners,
        "max_num_learner_restarts": spec.faultTolerance.maxLearnerRestarts,
        "learner_restart_timeout_s": spec.faultTolerance.learnerRestartTimeoutSeconds,
        # Worker pods may still be starting when the driver asks for its placement group.
        "placement_timeout_s": settings.provision_timeout_s,
    }
    if spec.rollouts.replicas:
        owned["custom_resources_per_env_runner"] = {ROLLOUT_RESOURCE: 1}
    if spec.learners.replicas:
        owned["custom_resources_per_learner"] = {LEARNER_RESOURCE: 1}
    if spec.checkpoint.numToKeep is not None:
        owned["num_to_keep"] = spec.checkpoint.numToKeep
    options = settings.s3_options(spec.storage)
    if options:
        owned["storage_options"] = options
    return {**spec.config, **owned}


def entrypoint(
    spec: ExperimentSpec,
    namespace: str,
    name: str,
    settings: Settings,
    resume_from: str | None = None,
) -> str:
    """The shell command Ray's job API runs on the head.

    Always ``--resume``: a first run finds no checkpoint and starts fresh; every later run
    continues from ``resume_from`` (the newest checkpoint the operator knows of) or, when that
    does not verify, the newest valid one under the experiment folder.

    A sweep (``sweep.is_sweep``) also gets ``spec.tune`` as the CLI's sweep flags, and never
    ``--resume-from``: there ``--resume`` restores the Tune experiment from its folder in S3,
    every trial from its own newest checkpoint.
    """
    args = [
        "rltrainer",
        "train",
        "--algo",
        spec.algorithm,
        "--env",
        spec.env,
        "--config",
        json.dumps(driver_config(spec, settings), sort_keys=True, separators=(",", ":")),
        "--stop",
        json.dumps(spec.stop, sort_keys=True, separators=(",", ":")),
        "--storage-path",
        storage_path(spec, namespace),
        "--name",
        name,
        "--checkpoint-freq",
        str(spec.checkpoint.frequency),
        "--resume",
    ]
    if spec.checkpoint.atEnd:
        args.append("--checkpoint-at-end")
    if is_sweep(spec):
        args += sweep_flags(spec)
    elif resume_from:
        args += ["--resume-from", resume_from]
    return shlex.join(args)


def sweep_flags(spec: ExperimentSpec) -> list[str]:
    """``spec.tune`` as ``rltrainer train``'s sweep flags (its defaults when absent)."""
    if spec.tune is None:
        return []
    tune = spec.tune
    flags = ["--num-samples", str(tune.numSamples), "--scheduler", tune.scheduler]
    if tune.schedulerConfig:
        options = json.dumps(tune.schedulerConfig, sort_keys=True, separators=(",", ":"))
        flags += ["--scheduler-config", options]
    if tune.maxConcurrentTrials is not None:
        flags += ["--max-concurrent-trials", str(tune.maxConcurrentTrials)]
    return [*flags, "--metric", tune.metric, "--mode", tune.mode]


def submission(
    spec: ExperimentSpec,
    namespace: str,
    name: str,
    settings: Settings,
    submission_id: str,
    resume_from: str | None = None,
) -> dict[str, Any]:
    """The body of ``POST /api/jobs/`` (Ray's job submission REST API)."""
    return {
        "submission_id": submission_id,
        "entrypoint": entrypoint(spec, namespace, name, settings, resume_from),
        "metadata": {"rltrainer.io/experiment": f"{namespace}/{name}"},
    }
