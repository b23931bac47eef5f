"""Ray connection and the algorithm's placement group.

An algorithm reserves ONE placement group: one bundle per learner, then one per env runner,
then one per evaluation env runner, each actor pinned to its bundle. The driver is the
calling process, not an actor, so a standalone algorithm reserves nothing for it (two
algorithms fit side by side on a laptop);
Tune, which starts the driver as a trial actor, gets a driver bundle first from
``Algorithm.default_resource_request``, and the trial's actors use that group. Learner bundles carry
``custom_resources_per_learner`` and env-runner bundles ``custom_resources_per_env_runner``,
so on a cluster whose learner nodes advertise e.g. ``{"rltrainer_learner": 1}`` and rollout
nodes ``{"rltrainer_rollout": 4}`` every actor lands on the right kind of node.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from rltrainer.errors import ConfigError, ResourceError

logger = logging.getLogger(__name__)

Bundle = dict[str, float]

#: Logical CPUs per core of a local Ray instance rltrainer starts (``init_ray``): env runners
#: mostly wait on each other and the learner, so two share a core well (as RLlib's examples do).
ACTORS_PER_CORE = 2

#: The GCS address of the local instance ``init_ray`` started in this process (None: none yet).
_started_address: str | None = None


@dataclass(frozen=True)
class Placement:
    """A reserved placement group and which bundle each actor uses."""

    group: Any  # ray.util.placement_group.PlacementGroup
    num_learners: int
    first_actor_bundle: int = 0  # 1 when bundle 0 is the driver's (a Tune trial's group)
    owned: bool = True  # False: Tune's trial group, which Tune removes

    def learner_bundle(self, index: int) -> int:
        return self.first_actor_bundle + index

    def env_runner_bundle(self, index: int) -> int:
        return self.first_actor_bundle + self.num_learners + index

    def actor_options(self, bundle: Bundle, bundle_index: int) -> dict[str, Any]:
        """``ray.remote(...).options()`` for an actor using ``bundle``, pinned to its bundle."""
        return {
            "num_cpus": bundle.get("CPU", 0),
            "num_gpus": bundle.get("GPU", 0),
            "resources": {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")},
            "scheduling_strategy": self.scheduling(bundle_index),
        }

    def scheduling(self, bundle_index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.group,
            placement_group_bundle_index=bundle_index,
            placement_group_capture_child_tasks=True,
        )


def learner_bundle(config: Any) -> Bundle:
    return _bundle(
        "learner",
        config.num_cpus_per_learner,
        0 if config.fake_gpus else config.num_gpus_per_learner,
        config.custom_resources_per_learner,
    )


def env_runner_bundle(config: Any) -> Bundle:
    return _bundle(
        "env runner",
        config.num_cpus_per_env_runner,
        0 if config.fake_gpus else config.num_gpus_per_env_runner,
        config.custom_resources_per_env_runner,
    )


def algorithm_bundles(config: Any) -> list[Bundle]:
    """Driver bundle, then the actors' bundles (what Tune reserves for one trial)."""
    driver: Bundle = {"CPU": float(config.num_cpus_for_main_process)}
    # The driver's learner (num_learners=0) and its sampling runner (num_env_runners=0) share
    # one process, so they share its GPU share too.
    learner_gpus = config.num_gpus if config.num_learners == 0 else 0
    runner_gpus = config.num_gpus_per_env_runner if config.num_env_runners == 0 else 0
    if max(learner_gpus, runner_gpus) > 0 and not config.fake_gpus:
        driver["GPU"] = float(max(learner_gpus, runner_gpus))
    return [driver, *actor_bundles(config)]


def actor_bundles(config: Any) -> list[Bundle]:
    """``num_learners`` learner bundles, then ``num_env_runners`` env-runner ones, then
    ``evaluation_num_env_runners`` ones (with ``evaluation_config``'s resources, as RLlib)."""
    evaluation: list[Bundle] = []
    if config.evaluation_num_env_runners:
        bundle = env_runner_bundle(config.get_evaluation_config())
        evaluation = [dict(bundle) for _ in range(config.evaluation_num_env_runners)]
    return (
        [learner_bundle(config) for _ in range(config.num_learners)]
        + [env_runner_bundle(config) for _ in range(config.num_env_runners)]
        + evaluation
    )


def needs_ray(config: Any) -> bool:
    """Only remote (evaluation) env runners or learners, or sub-envs in actors of their own
    (``remote_worker_envs``, also in the driver's runner), need Ray; everything else runs in
    this process."""
    actors = config.num_env_runners > 0 or config.num_learners > 0 or config.evaluation_num_env_runners > 0
    evaluation = config.get_evaluation_config() if config.evaluation_config else config
    return actors or uses_remote_envs(config) or uses_remote_envs(evaluation)


def uses_remote_envs(config: Any) -> bool:
    """Whether env runners of ``config`` make each sub-env a Ray actor (``remote_worker_envs``
    applies with more than one env per runner, as in RLlib)."""
    return bool(config.remote_worker_envs) and config.num_envs_per_env_runner > 1


#: ``env_task_fn`` sets tasks on env objects, which remote envs keep in their actors.
REMOTE_ENVS_WITHOUT_TASKS = (
    "env_task_fn sets tasks on the env runners' sub-env objects, but with remote_worker_envs=True "
    "they live in actors of their own: set remote_worker_envs=False (or num_envs_per_env_runner=1) "
    "or remove env_task_fn"
)


def init_ray(config: Any) -> None:
    """Connect to Ray unless connected: ``RAY_ADDRESS`` if set, else a local instance.

    A local instance gets twice the CPUs the algorithm's actors ask for (at least
    ``ACTORS_PER_CORE`` per core), so a laptop can run e.g. 4 env runners on 2 cores
    (oversubscribed, as RLlib's examples do), a second algorithm of the same size can start
    beside the first (e.g. one restored from the other's checkpoint while it is alive), and a
    later one of this process whose defaults were fitted to the machine fits it.
    """
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=True)
        return
    bundles = actor_bundles(config)
    totals: Bundle = {}
    for bundle in bundles:
        for key, value in bundle.items():
            totals[key] = totals.get(key, 0.0) + value
    cpus, gpus = totals.pop("CPU", 0.0), totals.pop("GPU", 0.0)
    ray.init(
        address="local",  # a new instance: without it Ray would attach to any cluster on this machine
        num_cpus=max(ACTORS_PER_CORE * (os.cpu_count() or 1), 2 * int(-(-cpus // 1))),
        num_gpus=int(-(-gpus // 1)) if gpus else None,
        resources={key: 2 * value for key, value in totals.items()} or None,
        include_dashboard=False,
        log_to_driver=True,
    )
    global _started_address
    _started_address = ray.get_runtime_context().gcs_address
    logger.info("started a local Ray instance for %s", bundles)


def on_started_instance() -> bool:
    """Whether Ray is connected to the local instance ``init_ray`` started in this process (a
    second algorithm built after the first, e.g. in a notebook, runs on it too)."""
    import sys

    ray = sys.modules.get("ray")  # not imported: not connected
    if ray is None or not ray.is_initialized() or _started_address is None:
        return False
    return ray.get_runtime_context().gcs_address == _started_address


def reserve(config: Any, in_trial: bool = False) -> Placement:
    """Reserve the placement group of the algorithm's actors, or fail saying what was asked and
    what exists.

    ``in_trial``: the algorithm is a Tune trial, whose group Tune reserved from
    ``default_resource_request`` (driver bundle first, then the actors'): the actors use it.
    A trial given other resources (``tune.with_resources``) reserves its own group.
    """
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util import get_current_placement_group
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = actor_bundles(config)
    if in_trial:
        group = get_current_placement_group()
        if group is not None and group.bundle_specs[1:] == bundles:
            return Placement(group=group, num_learners=config.num_learners, first_actor_bundle=1, owned=False)
        logger.info("this trial's resources are not the algorithm's bundles; reserving its own group")
    group = placement_group(bundles, strategy=config.placement_strategy)
    try:
        ray.get(group.ready(), timeout=config.placement_timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        raise ResourceError(
            f"the cluster cannot place this algorithm within placement_timeout_s="
            f"{config.placement_timeout_s}: requested {len(bundles)} bundles {bundles} with strategy "
            f"{config.placement_strategy}; the cluster has {_describe(ray.cluster_resources())} in total "
            f"and {_describe(ray.available_resources())} available"
        ) from None
    return Placement(group=group, num_learners=config.num_learners)


def release(placement: Placement | None) -> None:
    if placement is None or not placement.owned:
        return
    import ray
    from ray.util.placement_group import remove_placement_group

    if ray.is_initialized():
        remove_placement_group(placement.group)


def _bundle(kind: str, cpus: float, gpus: float, custom: dict[str, float]) -> Bundle:
    bundle: Bundle = {}
    if cpus:
        bundle["CPU"] = float(cpus)
    if gpus:
        bundle["GPU"] = float(gpus)
    bundle.update({key: float(value) for key, value in custom.items() if value})
    if not bundle:
        raise ConfigError(
            f"each {kind} must request some resource: set num_cpus_per_{kind.replace(' ', '_')} > 0"
        )
    return bundle


def _describe(resources: dict[str, float]) -> str:
    shown = {
        k: round(v, 3)
        for k, v in sorted(resources.items())
        if not k.startswith(("node:", "memory", "object_store"))
    }
    return str(shown)
