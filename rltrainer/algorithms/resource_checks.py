"""Resources an algorithm asks for, checked at ``build()`` against what exists.

Without these checks a GPU asked on a machine without one trained silently on the CPU, and
more env runners than the machine holds waited with no message. As RLlib does, a GPU setting
with no GPU found is refused (``_fake_gpus: true`` lays a GPU config out on the CPU to test
it); when rltrainer starts the Ray instance itself it knows the machine's cores and refuses
actors that cannot fit, and on an existing cluster the placement group's timeout
(``placement_timeout_s``) ends the wait with the same account of what was asked.

Only what the user asked for is refused. An algorithm's default env-runner count is RLlib's,
sized for a cluster (Ape-X's 32, ES's 10): on a machine rltrainer starts Ray on (also for a later
algorithm of the same process, on the instance it started), a default that does not fit is
lowered to what fits, with one logged line saying so and how to keep it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rltrainer.core.cluster import (
    ACTORS_PER_CORE,
    Placement,
    actor_bundles,
    env_runner_bundle,
    init_ray,
    needs_ray,
    on_started_instance,
    reserve,
)
from rltrainer.errors import ConfigError, ResourceError

logger = logging.getLogger(__name__)


def starts_own_ray() -> bool:
    """Whether the actors run on a local Ray instance rltrainer starts: ``init_ray`` would start
    one (no connection, no ``RAY_ADDRESS``), or started the one connected, in this process."""
    if on_started_instance():
        return True
    if os.environ.get("RAY_ADDRESS"):
        return False
    import sys

    ray = sys.modules.get("ray")  # not imported: not connected (and importing it costs ~1 s)
    return ray is None or not ray.is_initialized()


def gpu_settings(config: Any) -> dict[str, float]:
    """The GPU settings that ask for a GPU, by name (none with ``_fake_gpus``)."""
    if config.fake_gpus:
        return {}
    asked = {
        "num_gpus": config.num_gpus if config.num_learners == 0 else 0,
        "num_gpus_per_learner": config.num_gpus_per_learner if config.num_learners else 0,
        "num_gpus_per_env_runner": config.num_gpus_per_env_runner,
    }
    if config.evaluation_num_env_runners:
        asked["evaluation_config.num_gpus_per_env_runner"] = (
            config.get_evaluation_config().num_gpus_per_env_runner
        )
    return {name: value for name, value in asked.items() if value}


def check_gpus(config: Any, on_cluster: bool) -> None:
    """``ConfigError`` when a setting asks for a GPU and none is found: on this machine for the
    driver's learner and runner and for a Ray instance rltrainer starts; ``on_cluster`` (Ray
    connected to an existing cluster): in the cluster's resources for the actors."""
    asked = gpu_settings(config)
    if not asked:
        return
    import torch

    found = torch.cuda.device_count()
    in_driver = (config.num_learners == 0 and config.num_gpus) or (
        config.num_env_runners == 0 and config.num_gpus_per_env_runner
    )
    if found == 0 and not in_driver and on_cluster:
        import ray

        found = int(ray.cluster_resources().get("GPU", 0))
        where = "in the Ray cluster"
    else:
        where = "on this machine (torch.cuda.device_count())"
    if found:
        return
    settings = ", ".join(f"{name}={value:g}" for name, value in asked.items())
    raise ConfigError(
        f"{settings} asks for a GPU, but none was found {where}: GPUs found: 0. Set "
        f"{' and '.join(f'{name}=0' for name in asked)} to train on the CPU, or _fake_gpus: true "
        "(.resources(_fake_gpus=True)) to test this GPU layout on the CPU"
    )


def cpus_asked(config: Any) -> tuple[float, str]:
    """The CPUs the algorithm's actors ask for, and how (for messages)."""
    total = sum(bundle.get("CPU", 0.0) for bundle in actor_bundles(config))
    parts = [
        f"{config.num_env_runners} env runner(s) x num_cpus_per_env_runner={config.num_cpus_per_env_runner:g}"
    ]
    if config.num_learners:
        parts.append(
            f"{config.num_learners} learner(s) x num_cpus_per_learner={config.num_cpus_per_learner:g}"
        )
    if config.evaluation_num_env_runners:
        parts.append(f"{config.evaluation_num_env_runners} evaluation env runner(s)")
    return total, " + ".join(parts)


def what_to_lower(config: Any) -> str:
    """The settings that size the request, as a hint."""
    names = ["num_env_runners", "num_cpus_per_env_runner"]
    if config.num_learners:
        names.append("num_learners")
    if config.evaluation_num_env_runners:
        names.append("evaluation_num_env_runners")
    return f"lower {' or '.join(names)}"


def local_cpus() -> tuple[int, int]:
    """``(cores, CPUs)`` of a local Ray instance rltrainer starts (``ACTORS_PER_CORE`` per core)."""
    cores = os.cpu_count() or 1
    return cores, ACTORS_PER_CORE * cores


def fit_env_runners(config: Any) -> None:
    """For a Ray instance rltrainer starts: lower a default ``num_env_runners`` whose actors the
    machine cannot hold to as many as it can, in one logged line. A count the user set
    (``config.model_fields_set``) is kept, for ``check_cpus`` to refuse if it does not fit."""
    if "num_env_runners" in config.model_fields_set:
        return
    cores, available = local_cpus()
    needed, _ = cpus_asked(config)
    per_runner = env_runner_bundle(config).get("CPU", 0.0)
    if needed <= available or per_runner <= 0:
        return
    default = config.num_env_runners
    others = needed - default * per_runner  # learners and evaluation runners
    fitted = min(default, max(0, int((available - others) // per_runner)))
    if fitted == default:
        return
    config.num_env_runners = fitted
    algorithm = type(config).ALGORITHM or type(config).__name__
    logger.warning(
        "num_env_runners lowered from %d (%s's default) to %d: the local Ray instance rltrainer starts "
        "has %d CPUs (%d cores, %d actors per core). For %d env runners, connect to a cluster "
        "(RAY_ADDRESS, --ray-address) or start Ray with the CPUs (--ray-num-cpus %g, "
        "ray.init(num_cpus=%g)); a num_env_runners you set is never lowered",
        default, algorithm, fitted, available, cores, ACTORS_PER_CORE, default, needed, needed,
    )  # fmt: skip


def check_cpus(config: Any) -> None:
    """For a Ray instance rltrainer starts: ``ResourceError`` when the actors ask for more CPUs
    than the machine holds (``ACTORS_PER_CORE`` per core)."""
    cores, available = local_cpus()
    needed, how = cpus_asked(config)
    if needed <= available:
        return
    raise ResourceError(
        f"this algorithm's actors need {needed:g} CPUs ({how}), but the local Ray instance "
        f"rltrainer starts has {available} ({cores} cores, {ACTORS_PER_CORE} actors per core): "
        f"{what_to_lower(config)}, or connect to a larger cluster (RAY_ADDRESS)"
    )


def placement_failed(err: ResourceError, config: Any) -> ResourceError:
    """``reserve()``'s timeout on an existing cluster, with what was needed and what to lower."""
    needed, how = cpus_asked(config)
    return ResourceError(f"{err}. The actors need {needed:g} CPUs ({how}): {what_to_lower(config)}")


def connect_and_reserve(config: Any, in_trial: bool = False) -> Placement | None:
    """Fit default env runners to a machine rltrainer starts Ray on, check the GPUs and CPUs asked
    for, connect to Ray (only when actors are needed) and reserve the actors' placement group;
    None when nothing is reserved."""
    own_ray = starts_own_ray()
    if own_ray:
        fit_env_runners(config)
    if not needs_ray(config) or own_ray:  # what exists is this machine's
        check_gpus(config, on_cluster=False)
    if not needs_ray(config):
        return None
    if own_ray:
        check_cpus(config)
    init_ray(config)
    if not own_ray:
        check_gpus(config, on_cluster=True)
    if not actor_bundles(config):  # remote_worker_envs' actors alone reserve nothing (no CPUs)
        return None
    try:
        return reserve(config, in_trial=in_trial)
    except ResourceError as err:
        raise placement_failed(err, config) from None
