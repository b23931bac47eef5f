"""What an algorithm asks for is checked at ``build()``: a GPU where none is found, or more
env runners than the machine holds, is refused with what was asked, what exists and what to change."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.resource_checks import ACTORS_PER_CORE, check_cpus
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
