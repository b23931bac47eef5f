"""What an algorithm asks for is checked at ``build()``: a GPU where none is found, or more
env runners than the machine holds, is refused with what was asked, what exists and what to change;
a default env-runner count (RLlib's, sized for a cluster) that the machine cannot hold is lowered
to what it holds, in one logged line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.registry import get_algorithm_class
from rltrainer.algorithms.resource_checks import ACTORS_PER_CORE, check_cpus, fit_env_runners
from rltrainer.errors import ConfigError, ResourceError

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")


@no_gpu
@pytest.mark.parametrize(
    ("resources", "named"),
    [
        ({"num_gpus": 1}, "num_gpus=1"),
        ({"num_gpus_per_env_runner": 0.5}, "num_gpus_per_env_runner=0.5"),
    ],
)
def test_a_gpu_asked_without_one_is_refused(resources, named) -> None:
    config = PPOConfig().environment("CartPole-v1").resources(**resources)
    with pytest.raises(ConfigError) as raised:
        config.build()
    message = str(raised.value)
    assert named in message and "GPUs found: 0" in message and "_fake_gpus: true" in message


@no_gpu
def test_fake_gpus_still_lay_a_gpu_config_out_on_the_cpu() -> None:
    config = PPOConfig().environment("CartPole-v1").resources(num_gpus=1, _fake_gpus=True)
    with config.build() as algo:
        assert str(algo.learner_group.local_learner.device) == "cpu"


@no_gpu
def test_cli_says_it_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rltrainer", "train", "--algo", "PPO", "--env", "CartPole-v1",
         "--config", '{"num_gpus": 1}', "--stop", '{"training_iteration": 1}'],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "GPUs found: 0" in done.stderr


def test_more_env_runners_than_a_local_instance_holds_are_refused_before_ray_starts() -> None:
    cores = os.cpu_count() or 1
    too_many = ACTORS_PER_CORE * cores + 1
    config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=too_many)
    with pytest.raises(ResourceError) as raised:
        check_cpus(config)
    message = str(raised.value)
    assert f"need {too_many} CPUs" in message and f"has {ACTORS_PER_CORE * cores}" in message
    assert "lower num_env_runners or num_cpus_per_env_runner" in message
    check_cpus(config.env_runners(num_env_runners=ACTORS_PER_CORE * cores))  # what fits passes


@pytest.mark.parametrize("algorithm", ["ES", "APEX", "APEX_DDPG"])
def test_a_default_runner_count_the_machine_cannot_hold_is_lowered_in_one_line(
    algorithm: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    config = get_algorithm_class(algorithm).config_class().environment("CartPole-v1")
    default = config.num_env_runners  # ES's 10, Ape-X's 32
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.resource_checks"):
        fit_env_runners(config)
    assert config.num_env_runners == 2 * ACTORS_PER_CORE
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith(
        f"num_env_runners lowered from {default} ({algorithm}'s default) to 4: the local Ray instance "
        "rltrainer starts has 4 CPUs (2 cores, 2 actors per core)"
    )
    assert "(RAY_ADDRESS, --ray-address)" in message and f"--ray-num-cpus {default}" in message
    check_cpus(config)  # what is left fits


def test_a_runner_count_the_user_set_is_never_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    config = get_algorithm_class("ES").config_class().environment("CartPole-v1")
    config.env_runners(num_env_runners=10)  # ES's default, given explicitly
    fit_env_runners(config)
    assert config.num_env_runners == 10
    with pytest.raises(ResourceError, match="need 10 CPUs .* lower num_env_runners"):
        check_cpus(config)
    from_dict = get_algorithm_class("ES").config_class.from_dict({"num_workers": 10})  # a file's
    fit_env_runners(from_dict)
    assert from_dict.num_env_runners == 10


def test_a_default_that_fits_and_other_requests_are_kept(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    a2c = get_algorithm_class("A2C").config_class().environment("CartPole-v1")  # 2 runners, 2 CPUs
    fit_env_runners(a2c)
    assert a2c.num_env_runners == 2 and not caplog.records
    # Runners of 2 CPUs each beside a learner the user asked for: as many as the rest holds.
    es = get_algorithm_class("ES").config_class().environment("CartPole-v1")
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    es.env_runners(num_cpus_per_env_runner=2).learners(num_learners=1)
    fit_env_runners(es)
    assert es.num_env_runners == 3  # (8 - 1 learner CPU) // 2


def test_build_refuses_them_without_waiting() -> None:
    code = (
        "import ray, time\n"
        "from rltrainer.algorithms.ppo import PPOConfig\n"
        "start = time.time()\n"
        "try:\n"
        "    PPOConfig().environment('CartPole-v1').env_runners(num_env_runners=64).build()\n"
        "except Exception as err:\n"
        "    print(type(err).__name__, err)\n"
        "print('ray started:', ray.is_initialized(), 'seconds:', round(time.time() - start))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("ResourceError this algorithm's actors need 64 CPUs"), (
        done.stdout + done.stderr
    )
    assert "ray started: False" in done.stdout


def test_an_existing_cluster_gives_up_after_the_placement_timeout(local_ray) -> None:  # noqa: ARG001
    import ray

    cpus = int(ray.cluster_resources()["CPU"])
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=cpus + 1)
        .resources(placement_timeout_s=1)
    )
    with pytest.raises(ResourceError) as raised:
        config.build()
    message = str(raised.value)
    assert "placement_timeout_s=1" in message and f"need {cpus + 1} CPUs" in message
    assert "lower num_env_runners" in message
