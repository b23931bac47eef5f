"""Learner fault tolerance: learner actors SIGKILLed during training are replaced, and the
update they were in is run again from the driver's copy of the state (no update lost or doubled).

The kills come from the driver's ``on_learn_on_batch`` hook, which runs in ``train()`` just
before the train batch goes to the learner actors: at once (the update is sent to a dead
learner) or after a random delay (mostly while the learners are inside the update), on a real
local Ray instance.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
import torch

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.errors import WorkerError

pytestmark = pytest.mark.usefixtures("local_ray")

EPOCHS, MINIBATCHES = 8, 2  # Adam steps per update: 16
#: Learner kills with one learner: two at once (they land in train() for sure), one at a random
#: point of an update. Each replaces the whole group (a new process per learner, ~15 s on 2 busy
#: cores), so two data-parallel learners are killed once (at once): the group of two is replaced
#: and rejoined, which the random timing does not change.
KILLS = {1: 3, 2: 1}


class KillBeforeUpdate(DefaultCallbacks):
    """SIGKILLs the planned learner process as the driver sends the next update (driver side)."""

    plan: list[tuple[int, float]] = []  # (pid, delay in seconds) per coming update
    timers: list[threading.Timer] = []

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs) -> None:  # noqa: ARG002
        if KillBeforeUpdate.plan:
            pid, delay_s = KillBeforeUpdate.plan.pop(0)
            if delay_s == 0:
                os.kill(pid, signal.SIGKILL)
            else:
                timer = threading.Timer(delay_s, os.kill, (pid, signal.SIGKILL))
                KillBeforeUpdate.timers.append(timer)
                timer.start()


def config(num_learners: int, **fault_tolerance) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=64)
        .training(train_batch_size=256, minibatch_size=256 // MINIBATCHES, num_epochs=EPOCHS)
        .resources(num_learners=num_learners)
        .fault_tolerance(**fault_tolerance)
        .callbacks(KillBeforeUpdate)
        .debugging(seed=1, log_level="ERROR")
        .reporting(metrics_num_episodes_for_smoothing=5)
    )


def learner_pids(algo) -> list[int]:
    return algo.learner_group.foreach_learner(lambda _learner: os.getpid())


def train_killing(algo, pid: int, delay_s: float) -> dict:
    """One ``train()`` that SIGKILLs ``pid`` ``delay_s`` after its update was sent."""
    KillBeforeUpdate.plan.append((pid, delay_s))
    try:
        return algo.train()
    finally:
        while KillBeforeUpdate.timers:
            KillBeforeUpdate.timers.pop().join()


def adam_steps(algo) -> list[int]:
    return algo.learner_group.foreach_learner(lambda learner: int(learner.optimizer.step_count))


@pytest.mark.parametrize("num_learners", [1, 2])
def test_sigkilled_learners_are_replaced_and_no_update_is_lost(num_learners):
    kills = KILLS[num_learners]
    algo = config(num_learners, max_num_learner_restarts=kills).build()
    rng = random.Random(num_learners)
    try:
        algo.train()  # the first iteration also warms up; the second is a typical one
        update_s = algo.train()["timers"]["learn_time_ms"] / 1000
        during_train = 0
        for kill in range(kills):
            pids = learner_pids(algo)
            before = algo.learner_group.num_restarts
            # Every other kill at once (it lands in train() for sure); the others at a random
            # point of the update (or, if it was quicker, just after it).
            delay_s = 0 if kill % 2 == 0 else rng.uniform(0.01, update_s)
            result = train_killing(algo, rng.choice(pids), delay_s)
            during_train += result["num_learner_restarts"] - before
            assert set(learner_pids(algo)).isdisjoint(pids), "the whole group is new"
        # A kill after the update was found by learner_pids, and restarted there.
        at_once = (kills + 1) // 2
        assert during_train >= at_once, f"only {during_train} of {kills} kills landed in train()"
        result = algo.train()
        iterations = result["training_iteration"]
        assert iterations == kills + 3 and result["num_learner_restarts"] == kills
        # Every update ran exactly once on the state before it: Adam's step count says so.
        steps = iterations * EPOCHS * MINIBATCHES
        assert adam_steps(algo) == [steps] * num_learners
        assert algo.learner_group.get_state()["optimizer"]["step"] == steps
        # The learners agree with each other and with the driver's mirror (what env runners use).
        mirror = algo.learner_group.get_weights()
        for weights in algo.learner_group.foreach_learner(lambda learner: learner.get_weights()):
            for name, tensor in weights.items():
                assert torch.equal(tensor, mirror[name]), name
        # One death more is one too many.
        os.kill(learner_pids(algo)[0], signal.SIGKILL)
        with pytest.raises(WorkerError, match=f"max_num_learner_restarts={kills} restarts are used up"):
            algo.train()
    finally:
        algo.stop()


def test_without_restarts_a_dead_learner_is_one_error():
    algo = config(1, restart_failed_learners=False).build()
    try:
        os.kill(learner_pids(algo)[0], signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"a learner actor died: .*\(restart_failed_learners=False\)"):
            algo.train()
    finally:
        algo.stop()


def test_learners_that_cannot_be_placed_again_time_out_with_a_message():
    """A restart waits for the bundle (a lost node coming back), within learner_restart_timeout_s."""
    import ray

    algo = config(1).build()
    try:
        # Shorter than the learners' first start may take on a loaded machine: set after build.
        algo.learner_group.config = algo.config.model_copy(update={"learner_restart_timeout_s": 1.0})
        # Something else takes the dead learner's CPU in its bundle and keeps it.
        options = algo._placement.actor_options({"CPU": 1}, algo._placement.learner_bundle(0))
        squatter = ray.remote(_Sleeper).options(**options).remote()
        os.kill(learner_pids(algo)[0], signal.SIGKILL)
        ray.get(squatter.ready.remote(), timeout=30)
        started = time.monotonic()
        with pytest.raises(WorkerError, match=r"did not start within learner_restart_timeout_s=1 s"):
            algo.train()
        assert time.monotonic() - started < 10
        assert algo.learner_group.num_restarts == 1
        ray.kill(squatter)
    finally:
        algo.stop()


class _Sleeper:
    def ready(self) -> bool:
        return True


def test_a_result_lost_with_its_learners_node_counts_as_that_learners_death(monkeypatch) -> None:
    """A large result lives in its learner node's object store and actor calls are not retried:
    when the node goes (a learner Pod killed) the driver gets ``ObjectLostError`` where a dead
    actor gives ``RayActorError``. Both mean: replace the learners (seen in the journey on Pods,
    where it failed the driver). Ray's calls are stubbed here: the node's loss itself is what
    ``tests/node``'s journey does."""
    import ray
    from ray.exceptions import ObjectReconstructionFailedError

    from rltrainer.core import learner_group

    lost = ObjectReconstructionFailedError("ab" * 14, call_site="update_from_batch")
    monkeypatch.setattr(ray, "wait", lambda pending, **_: (pending[:1], pending[1:]))

    def get(_ref, **_):
        raise lost

    monkeypatch.setattr(ray, "get", get)
    with pytest.raises(learner_group._LearnerDiedError, match="Failed to retrieve object"):
        learner_group.LearnerGroup._get(None, ["ref"])
