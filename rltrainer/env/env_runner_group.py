"""``EnvRunnerGroup`` (``algo.workers``): the local env runner plus remote ones as Ray actors.

With ``num_env_runners=0`` the local runner samples in this process and Ray is never
touched. With ``num_env_runners >= 1`` that many ``EnvRunner`` actors sample in parallel,
each pinned to its bundle of the algorithm's placement group; the local runner then only
serves inference (``compute_single_action``) and holds the global observation filter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rltrainer.core.cluster import Placement, env_runner_bundle
from rltrainer.env.apis.task_settable_env import resolve_env_task_fn
from rltrainer.env.env_runner import EnvRunner, EpisodeStats, Rollout
from rltrainer.env.registry import MultiAgentEnvFoundError, creators_for
from rltrainer.env.runner_failures import RunnerFailures, Starting, _as_numpy
from rltrainer.errors import WorkerError
from rltrainer.models.catalog import ModelCatalog
from rltrainer.utils.compression import unpack_rollout

logger = logging.getLogger(__name__)


class EnvRunnerGroup(RunnerFailures):
    """All env runners of an algorithm; RLlib's ``WorkerSet`` API over them.

    The group is built once every remote runner has started (answered its first health probe,
    within ``env_runner_startup_timeout_s``). Remote runners that die or time out are handled per
    the fault-tolerance settings: their sample for that round is dropped; with
    ``restart_failed_env_runners`` a replacement starts (in the same placement-group bundle,
    with the current weights and filter) once ``delay_between_env_runner_restarts_s`` has
    passed, and samples once it is up, while training goes on with the others; with
    ``ignore_env_runner_failures`` the runner is dropped; otherwise the failure is raised as a
    ``WorkerError`` naming the runner.
    """

    def __init__(
        self,
        config: Any,
        placement: Placement | None = None,
        index_offset: int = 0,
        local_worker_index: int = 0,
        in_evaluation: bool = False,
    ) -> None:
        """``index_offset``: this group's remote runners come after that many others in worker
        indices and placement bundles (evaluation runners follow the training ones);
        ``local_worker_index``: the local runner's worker index (seeds derive from it);
        ``in_evaluation``: the evaluation group (its runners' ``policy_config["in_evaluation"]``)."""
        self.config = config
        self._in_evaluation = in_evaluation
        self._placement = placement
        self._offset = index_offset
        self._env_task_fn = resolve_env_task_fn(config.env_task_fn)  # ConfigError for a bad name
        # For replacements: each runner's envs' tasks after the last env_task_fn call it answered,
        # the last call's results, and the runners that missed that call.
        self._env_tasks: dict[int, list[Any]] = {}
        self._task_results: dict[str, Any] | None = None
        self._missed_task_call: set[int] = set()
        # Multi-agent envs sample with their own runner class (the single-agent one is untouched):
        # known from the config, or found when the first env is made (a registered creator).
        self._runner_class = EnvRunner
        if config.is_multi_agent:
            self._use_multi_agent_runners()

        def make_local() -> Any:
            return self._runner_class(
                config,
                worker_index=local_worker_index,
                num_workers=config.num_env_runners,
                in_evaluation=in_evaluation,
            )

        try:
            self._local = make_local()
        except MultiAgentEnvFoundError:
            config._env_is_multi_agent = True
            self._use_multi_agent_runners()
            self._local = make_local()
        if self._env_task_fn is not None:
            try:
                self._local.task_settable_envs()  # ConfigError when the env has no tasks
            except BaseException:
                self._local.stop()
                raise
        self._remote: list[Any | None] = []  # by runner index (worker_index - 1 - offset); None: failed
        self._failures: list[int] = []  # consecutive failures per runner
        self._restart_at: dict[int, float] = {}  # runner index -> when to start its replacement
        self._starting: dict[int, Starting] = {}
        self._weights_ref: Any = None
        # Asynchronous sampling (sample_async): request -> (runner index, actor, caller's tag).
        self._in_flight: dict[Any, tuple[int, Any, Any]] = {}
        # The last answer to sample_async's requests (or the start of the wait for one): silent_s.
        self._answered_at = time.monotonic()
        self.num_restarts = 0
        if config.num_env_runners > 0:
            if placement is None:
                raise ValueError("remote env runners need the algorithm's placement group")
            self._remote = [None] * config.num_env_runners
            self._failures = [0] * config.num_env_runners
            try:
                for index in range(config.num_env_runners):
                    self._start(index, replacement=False)
                self._await_first_start()
            except BaseException:
                self.stop()
                raise

    def _use_multi_agent_runners(self) -> None:
        """Sample with ``MultiAgentEnvRunner``s, once the config holds together as a multi-agent one
        (the mapping imported, an algorithm that trains several policies)."""
        from rltrainer.algorithms.algorithm_config import check_multi_agent
        from rltrainer.env.multi_agent_env_runner import MultiAgentEnvRunner

        check_multi_agent(self.config)
        self._runner_class = MultiAgentEnvRunner

    @property
    def multi_agent(self) -> bool:
        """Whether the runners sample a multi-agent env (``MultiAgentEnvRunner``s)."""
        return self._runner_class is not EnvRunner

    def _create_actor(self, index: int) -> Any:
        import ray

        options = self._placement.actor_options(
            env_runner_bundle(self.config), self._placement.env_runner_bundle(self._offset + index)
        )
        return (
            ray.remote(self._runner_class)
            .options(**options)
            .remote(
                self.config,
                worker_index=self._worker_index(index),
                num_workers=self.config.num_env_runners,
                remote=True,
                env_creators=creators_for(self.config.env, self.config.env_config),
                custom_models=ModelCatalog.registered(),
                in_evaluation=self._in_evaluation,
            )
        )

    def _worker_index(self, index: int) -> int:
        """The worker index of remote runner ``index`` (0-based within this group)."""
        return self._offset + index + 1

    # --- access ---------------------------------------------------------------------
    def local_worker(self) -> EnvRunner:
        """The env runner in the driver process (samples when ``num_env_runners=0``)."""
        return self._local

    local_env_runner = property(local_worker)

    @property
    def remote_workers(self) -> list[Any]:
        """Env-runner actor handles by index (``None`` where a runner failed and is not back yet)."""
        return list(self._remote)

    def num_remote_workers(self) -> int:
        return len(self._remote)

    def healthy_env_runner_ids(self) -> list[int]:
        """Worker indices of the runners that sample (0: the local one, when there are no actors)."""
        if not self._remote:
            return [0]
        return [self._worker_index(i) for i, runner in enumerate(self._remote) if runner is not None]

    # --- sampling -------------------------------------------------------------------
    def sample(self, min_steps: int) -> tuple[list[Rollout], list[EpisodeStats]]:
        """Sample rounds (all live runners in parallel) until they hold ``min_steps`` env steps.

        One round suffices with ``rollout_fragment_length="auto"``. A runner that fails (or is
        not back yet) adds nothing to a round, so more rounds are sampled from the others: the
        batch keeps its size while a runner is down (half-sized batches, trained on for as
        many epochs, destabilised PPO until the replacement arrived).
        """
        per_runner = self.config.get_rollout_fragment_length() * self.config.num_envs_per_env_runner
        rollouts: list[Rollout] = []
        episodes: list[EpisodeStats] = []
        sampled = 0
        while sampled < max(1, min_steps):
            if not self._remote:
                rollout, new_episodes = self._local.sample()
                rollouts.append(rollout)
                episodes.extend(new_episodes)
                sampled += per_runner
                continue
            refs = {i: runner.sample_with_filter_delta.remote() for i, runner in self._live().items()}
            results, failures = self._collect(refs, "sample")
            for i, (rollout, new_episodes, delta) in results.items():
                self._failures[i] = 0
                rollouts.append(unpack_rollout(rollout))
                episodes.extend(new_episodes)
                self._local.filter.apply_delta(delta)
                sampled += per_runner
            self._handle_failures(failures)
            self._broadcast_filter()
        return rollouts, episodes

    def sample_async(
        self,
        max_in_flight: int,
        timeout: float,
        tag: Any = None,
        call: tuple[Any, ...] | None = None,
        refill: bool = True,
    ) -> list[tuple[Any, list[EpisodeStats], Any]]:
        """The samples the remote runners finished, without waiting for the others (IMPALA's
        asynchronous sampling): ``(rollout, episodes, tag)`` each, ``tag`` being what the call
        that sent its request gave (e.g. the weights' version the runner sampled with).

        ``call``: ``(fn, *args)`` to run in the runners instead of ``sample()`` (``fn(runner,
        *args)`` returns ``(payload, episodes, filter_delta)``, e.g. A3C's gradients).
        ``refill=False`` leaves sending the next requests to ``request_async``.

        Keeps ``max_in_flight`` sample requests queued on every live runner, so runners sample
        while the caller trains; waits up to ``timeout`` seconds for the first result, then takes
        every other one that is ready. A runner that dies or raises is handled per the
        fault-tolerance settings (restarted in the background, dropped, or raised); its other
        requests are discarded. Weights sent with ``sync_weights`` apply to the requests sent
        after them (an actor runs its calls in order).
        """
        import ray

        if not self._in_flight:  # the silence clock runs while requests are out
            self._answered_at = time.monotonic()
        self.request_async(max_in_flight, tag, call)
        refs = list(self._in_flight)
        if not refs:  # every runner failed: wait (at most timeout) for the next replacement
            if self.restarting:
                self._wait_for_replacement(timeout)
            if self.restarting:
                self._answered_at = time.monotonic()
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        results: list[tuple[Rollout, list[EpisodeStats], Any]] = []
        deltas: list[dict[str, np.ndarray]] = []
        failures: dict[int, str] = {}
        for ref in ready:
            index, actor, request_tag = self._in_flight.pop(ref)
            if self._remote[index] is not actor:
                continue  # sent to a runner that failed since: a replacement samples instead
            outcome, failure = self._result_or_failure(ref, "sample")
            if failure is not None:
                failures.setdefault(index, failure)
                continue
            rollout, episodes, delta = outcome
            self._failures[index] = 0
            deltas.append(delta)
            results.append((unpack_rollout(rollout), episodes, request_tag))
        self._handle_failures(failures)
        self._in_flight = {
            ref: entry for ref, entry in self._in_flight.items() if self._remote[entry[0]] is entry[1]
        }
        if results or self.restarting:  # a replacement's start-up is not a silent runner
            self._answered_at = time.monotonic()
        if results:
            self.apply_filter_deltas(deltas)
        if refill:
            self.request_async(max_in_flight, tag, call)
        return results

    def silent_s(self) -> float:
        """Seconds that ``sample_async``'s requests have gone unanswered, not counting a
        replacement's start-up: the asynchronous algorithms fail past ``sample_timeout_s``."""
        return time.monotonic() - self._answered_at

    def request_async(self, max_in_flight: int, tag: Any = None, call: tuple[Any, ...] | None = None) -> None:
        """Send requests (``sample()``, or ``call``) until every live runner has ``max_in_flight``
        queued (replacements that are due are started first)."""
        self._restart_due()
        queued = [0] * len(self._remote)
        for index, _, _ in self._in_flight.values():
            queued[index] += 1
        for index, runner in enumerate(self._remote):
            for _ in range(max_in_flight - queued[index] if runner is not None else 0):
                ref = runner.apply.remote(*call) if call else runner.sample_with_filter_delta.remote()
                self._in_flight[ref] = (index, runner, tag)

    def num_in_flight(self) -> int:
        """Sample requests sent with ``sample_async`` and not yet collected."""
        return len(self._in_flight)

    def _broadcast_filter(self) -> None:
        state = self._local.get_filter_state()
        if state and self._remote:  # ray.put would start Ray: never without remote runners
            import ray

            ref = ray.put(state)
            for runner in self._remote:
                if runner is not None:
                    runner.set_filter_state.remote(ref)

    def apply_filter_deltas(self, deltas: list[dict[str, np.ndarray]]) -> None:
        """Merge observation statistics the remote runners gathered outside ``sample()`` (e.g.
        ES's perturbed episodes) into the driver's filter and send it to every runner."""
        for delta in deltas:
            self._local.filter.apply_delta(delta)
        self._broadcast_filter()

    def sync_weights(
        self,
        weights: Any = None,
        *,
        policies: list[str] | None = None,
        from_worker_or_learner_group: Any = None,
        to_worker_indices: list[int] | None = None,
        **kwargs: Any,  # noqa: ARG002 - RLlib's other arguments (global_vars, timeout_seconds, ...)
    ) -> None:
        """Send weights (``{policy id: weights}``) to the env runners: one ``ray.put``, one
        reference each. RLlib's forms work too: no ``weights`` sends those of
        ``from_worker_or_learner_group`` (default: the driver's env runner) to the remote
        runners, ``policies`` (also RLlib's first positional argument) limits them to those
        policies, ``to_worker_indices`` to those runners (worker indices, 1-based)."""
        if isinstance(weights, list | tuple | set):  # RLlib's sync_weights(policies)
            weights, policies = None, list(weights)
        if weights is None:  # RLlib's form: the source's weights, to the others
            source = from_worker_or_learner_group or self._local
            weights = source.get_weights()
            if policies is not None and self.multi_agent:  # {policy id: weights}
                weights = {pid: value for pid, value in weights.items() if pid in policies}
            elif policies is not None and "default_policy" not in policies:
                return  # a single-agent group's one policy is not among them
            if source is not self._local:
                self._local.set_weights(weights)
        else:
            self._local.set_weights(weights)
        if self._remote:
            import ray

            self._weights_ref = ray.put(_as_numpy(weights))
            for index, runner in enumerate(self._remote):
                wanted = to_worker_indices is None or self._worker_index(index) in to_worker_indices
                if runner is not None and wanted:
                    runner.set_weights.remote(self._weights_ref)

    def set_filter_state(self, state: dict[str, np.ndarray]) -> None:
        self._local.set_filter_state(state)
        self._broadcast_filter()

    # --- RLlib's WorkerSet helpers ----------------------------------------------------
    def foreach_worker(self, fn: Callable[[EnvRunner], Any], local_worker: bool = True) -> list[Any]:
        """``fn(runner)`` for each env runner (the function is shipped to the actors)."""
        return self.foreach_worker_with_index(lambda runner, _index: fn(runner), local_worker)

    def foreach_env_runner(
        self,
        func: Callable[[EnvRunner], Any],
        local_env_runner: bool = True,
        **kwargs: Any,  # noqa: ARG002
    ) -> list[Any]:
        """RLlib's current name of ``foreach_worker``: ``func(runner)`` for each env runner
        (``local_env_runner``: the driver's too); RLlib's other arguments are accepted."""
        return self.foreach_worker(func, local_env_runner)

    def num_remote_env_runners(self) -> int:
        """RLlib's current name of ``num_remote_workers``."""
        return self.num_remote_workers()

    def num_healthy_remote_env_runners(self) -> int:
        """Remote env runners that are alive (RLlib's ``num_healthy_remote_workers``)."""
        return sum(runner is not None for runner in self._remote)

    num_healthy_remote_workers = num_healthy_remote_env_runners

    def foreach_policy(self, fn: Callable[..., Any]) -> list[Any]:
        """``fn(policy, policy_id)`` for every policy of every env runner (RLlib's
        ``WorkerSet.foreach_policy``), results in runner order."""
        return [
            result
            for results in self.foreach_worker(lambda runner: runner.foreach_policy(fn))
            for result in results
        ]

    def foreach_policy_to_train(self, fn: Callable[..., Any]) -> list[Any]:
        """``fn(policy, policy_id)`` for every trainable policy of every env runner."""
        return [
            result
            for results in self.foreach_worker(lambda runner: runner.foreach_policy_to_train(fn))
            for result in results
        ]

    def foreach_worker_with_index(
        self, fn: Callable[[EnvRunner, int], Any], local_worker: bool = True
    ) -> list[Any]:
        """``fn(runner, worker_index)`` for each healthy env runner; the local one has index 0."""
        results = [fn(self._local, 0)] if local_worker else []
        refs = {
            i: runner.apply.remote(fn, self._worker_index(i))
            for i, runner in enumerate(self._remote)
            if runner is not None
        }
        if not refs:
            return results
        done, failures = self._collect(refs, "foreach_worker", timeout=None)
        if failures:
            ids = sorted(self._worker_index(i) for i in failures)
            raise WorkerError(f"env runner(s) {ids} {failures[min(failures)]}")
        return results + [done[i] for i in sorted(done)]

    def foreach_worker_with_id(
        self, fn: Callable[[int, EnvRunner], Any], local_worker: bool = True
    ) -> list[Any]:
        """RLlib's ``foreach_worker_with_id``: ``fn(worker_index, runner)`` (the index first, as
        RLlib calls it) for each healthy env runner."""
        return self.foreach_worker_with_index(lambda runner, index: fn(index, runner), local_worker)

    def foreach_env(self, fn: Callable[[Any], Any]) -> list[list[Any]]:
        """``fn(env)`` for every sub-env of every runner; one list per runner."""
        return self.foreach_worker(lambda runner: runner.foreach_env(fn))

    def foreach_env_with_context(self, fn: Callable[[Any, Any], Any]) -> list[list[Any]]:
        """``fn(env, env_ctx)`` for every sub-env of every runner, with the ``EnvContext`` each
        was created with (``worker_index``, ``vector_index``); one list per runner (local first)."""
        return self.foreach_worker(lambda runner: runner.foreach_env_with_context(fn))

    def apply_env_task_fn(self, train_results: dict[str, Any]) -> None:
        """Set every sub-env of every runner to the config's ``env_task_fn(train_results, env,
        env_ctx)`` (RLlib's curriculum step after each iteration); nothing when it is unset.

        The local runner goes first, so an error in the function is raised here with its
        traceback. A remote runner that dies or does not answer is handled as one that fails
        to sample. A replacement runner starts on the tasks its predecessor had after the last
        call it answered, then gets the last call if its predecessor missed that one.
        """
        if self._env_task_fn is None:
            return
        self._task_results = train_results
        self._missed_task_call = set(range(len(self._remote)))
        self._local.apply_env_task_fn(self._env_task_fn, train_results)
        refs = {
            i: runner.apply_env_task_fn.remote(self._env_task_fn, train_results)
            for i, runner in enumerate(self._remote)
            if runner is not None
        }
        if not refs:
            return
        tasks, failures = self._collect(refs, "env_task_fn")
        self._env_tasks.update(tasks)
        self._missed_task_call -= set(tasks)
        self._handle_failures(failures)

    # --- calls on remote runners, fault-tolerant ---------------------------------------
    def live_remote_ids(self) -> list[int]:
        """Worker indices of the remote runners that take calls now (replacements that are due
        are started first)."""
        self._restart_due()
        return [self._worker_index(i) for i, runner in enumerate(self._remote) if runner is not None]

    def call_remote(
        self, args_by_id: dict[int, tuple], timeout: float, what: str, timeout_setting: str
    ) -> dict[int, Any]:
        """``runner.apply(*args)`` on the remote runners given by worker index, in parallel;
        returns their results by worker index. A runner that dies, raises or misses ``timeout``
        (the config's ``timeout_setting``) is left out and handled per the fault-tolerance
        settings: restarted, dropped, or raised as a ``WorkerError``."""
        refs = {
            wid - self._offset - 1: self._remote[wid - self._offset - 1].apply.remote(*args)
            for wid, args in args_by_id.items()
        }
        results, failures = self._collect(refs, what, timeout, timeout_setting)
        for index in results:
            self._failures[index] = 0
        self._handle_failures(failures)
        return {self._worker_index(i): result for i, result in results.items()}

    def stop(self) -> None:
        self._local.stop()
        if self._remote:
            import ray

            live = [runner for runner in self._remote if runner is not None]
            stops = [runner.stop.remote() for runner in live] if self.config.output is not None else []
            if stops:  # with offline output each runner finishes its file before it is killed
                ray.wait(stops, num_returns=len(stops), timeout=self.config.sample_timeout_s)
            for runner in [*self._remote, *(start.actor for start in self._starting.values())]:
                if runner is not None:
                    ray.kill(runner)
            self._remote = []
            self._restart_at = {}
            self._starting = {}
            self._in_flight = {}
