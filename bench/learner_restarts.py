"""Learner fault tolerance (issue 21): what the driver's copy of the learner state costs per
update, and how long a learner-group restart takes.

    python -m bench.learner_restarts
    python -m bench.learner_restarts --hiddens 64,64 1024,1024 --calls 20 --kills 3

For each network (PPO on CartPole-v1, ``num_learners=1``, one local Ray instance): the median
time of fetching the whole learner state (weights, Adam moments, extras: what every update's
reply now carries) against the weights alone (what the driver fetched before), over ``--calls``
calls; the mean iteration time; then ``--kills`` times a SIGKILL of the learner process
between iterations and the time of the ``train()`` that replaces it (the restart plus one
iteration), with 1 and 2 learners.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from bench.common import median, print_json_line
from rltrainer.algorithms.ppo import PPOConfig


def build(hiddens: list[int], num_learners: int):
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .training(model={"fcnet_hiddens": hiddens}, train_batch_size=256, minibatch_size=128, num_epochs=1)
        .resources(num_learners=num_learners)
        .debugging(log_level="ERROR")
        .build()
    )


def timed(call, calls: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hiddens", nargs="+", default=["64,64", "1024,1024"])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False)
    try:
        for spec in args.hiddens:
            hiddens = [int(size) for size in spec.split(",")]
            algo = build(hiddens, 1)
            try:
                algo.train()
                actor = algo.learner_group.remote_learners[0]
                weights = timed(
                    lambda actor=actor: ray.get(actor.apply.remote(lambda lrn: lrn.get_weights())), args.calls
                )
                state = timed(lambda actor=actor: ray.get(actor.get_state.remote()), args.calls)
                iteration = timed(algo.train, 5)
                params = sum(t.numel() for t in algo.learner_group.get_weights().values())
                print_json_line(
                    {
                        "bench": "learner_state_transfer",
                        "hiddens": hiddens,
                        "parameters": params,
                        "weights_ms": round(weights * 1000, 1),
                        "state_ms": round(state * 1000, 1),
                        "iteration_ms": round(iteration * 1000, 1),
                    }
                )
            finally:
                algo.stop()
        for num_learners in (1, 2):
            algo = build([64, 64], num_learners)
            try:
                algo.train()
                restarts = []
                for _ in range(args.kills):
                    pid = algo.learner_group.foreach_learner(lambda _lrn: os.getpid())[0]
                    os.kill(pid, signal.SIGKILL)
                    started = time.perf_counter()
                    algo.train()
                    restarts.append(time.perf_counter() - started)
                print_json_line(
                    {
                        "bench": "learner_restart",
                        "num_learners": num_learners,
                        "restarts": algo.learner_group.num_restarts,
                        "train_with_restart_s": round(median(restarts), 2),
                    }
                )
            finally:
                algo.stop()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
