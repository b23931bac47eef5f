"""RLlib's current callback forms: functions per hook (``callbacks(on_episode_end=fn)``),
``RLlibCallback``, the current episode names, and checkpoints whose callbacks cannot be
imported where they are loaded."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.errors import CallbackError, ConfigError

CALLS: list[tuple[str, float]] = []


def record_return(*, episode, env_runner, **kwargs):  # noqa: ARG001
    """A module-level function: checkpoints store its path and load it back."""
    CALLS.append(("function", episode.get_return()))
    episode.custom_data["seen"] = True
    episode.custom_metrics["return_seen"] = episode.get_return()
    episode.custom_metrics["length_seen"] = episode.get_length()
    episode.custom_metrics["runner_pid"] = os.getpid()
    assert env_runner is not None


def add_to_result(*, algorithm, result, **kwargs):  # noqa: ARG001
    result["seen_by_function"] = algorithm.iteration


def small_ppo(tmp_path, **callbacks):
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, rollout_fragment_length=64)
        .training(train_batch_size=128, minibatch_size=128, num_epochs=1)
        .reporting(storage_path=str(tmp_path), metrics_num_episodes_for_smoothing=1000)
        .callbacks(**callbacks)
        .debugging(seed=0)
    )


def test_functions_run_after_the_class_hook_in_order(tmp_path):
    from rltrainer.callbacks.callbacks import RLlibCallback

    class ClassFirst(RLlibCallback):
        def on_episode_end(self, *, episode, **kwargs):  # noqa: ARG002
            CALLS.append(("class", episode.get_return()))

    CALLS.clear()
    config = small_ppo(
        tmp_path,
        callbacks_class=ClassFirst,
        on_episode_end=[record_return, lambda episode, **kw: CALLS.append(("lambda", episode.get_return()))],  # noqa: ARG005
        on_train_result=add_to_result,
    )
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert CALLS and [name for name, _ in CALLS[:3]] == ["class", "function", "lambda"]
    assert CALLS[0][1] == CALLS[1][1] == CALLS[2][1]
    custom = result["custom_metrics"]
    assert custom["return_seen_mean"] == pytest.approx(result["episode_return_mean"])
    assert custom["length_seen_mean"] == pytest.approx(result["episode_len_mean"])
    assert result["seen_by_function"] == 1
    saved = config.to_dict()
    assert saved["callbacks_on_episode_end"][0] == "tests.test_callback_functions:record_return"
    assert saved["callbacks_on_train_result"] == "tests.test_callback_functions:add_to_result"


@pytest.mark.usefixtures("local_ray")
def test_functions_run_inside_remote_env_runners(tmp_path):
    algo = small_ppo(tmp_path, on_episode_end=record_return).env_runners(num_env_runners=1).build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["custom_metrics"]["runner_pid_min"] != os.getpid()


def test_a_failing_function_names_itself_and_the_runner(tmp_path):
    def broken(*, episode, **kwargs):  # noqa: ARG001
        raise KeyError("missing")

    algo = small_ppo(tmp_path, on_episode_end=broken).build()
    try:
        with pytest.raises(
            CallbackError,
            match=r"callback function .*broken \(callbacks\(on_episode_end=\.\.\.\)\) raised KeyError: "
            r"'missing' in env runner 0",
        ):
            algo.train()
    finally:
        algo.stop()


def test_bad_functions_and_unknown_hooks_are_refused():
    with pytest.raises(ConfigError, match=r"callbacks_on_episode_end.*expected a function"):
        PPOConfig().callbacks(on_episode_end=5)
    with pytest.raises(ConfigError, match=r"unknown key 'on_episode_ned'"):
        PPOConfig().callbacks(on_episode_ned=record_return)
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_module'"):
        small_ppo("/tmp", on_episode_end="no_such_module:fn").build()


def test_a_checkpoint_reloads_its_function_by_path(tmp_path):
    algo = small_ppo(tmp_path, on_episode_end=record_return).build()
    try:
        algo.train()
        path = algo.save()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.config.callbacks_on_episode_end == "tests.test_callback_functions:record_return"
        assert "return_seen_mean" in restored.train()["custom_metrics"]
    finally:
        restored.stop()


SCRIPT = """
import sys
from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig

class ScriptCallbacks(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["from_script"] = 1.0

config = (
    PPOConfig()
    .environment("CartPole-v1")
    .training(train_batch_size=64, minibatch_size=64, num_epochs=1)
    .reporting(storage_path=sys.argv[1])
    .callbacks(ScriptCallbacks, on_train_result=lambda result, **kw: None)
)
algo = config.build()
algo.train()
print(algo.save())
algo.stop()
"""


def test_a_checkpoint_of_a_script_callbacks_class_loads_elsewhere(tmp_path, caplog):
    """Callbacks defined in the training script (``__main__``) cannot be imported by another
    process: the checkpoint loads without them, with a warning, or with the caller's own."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, check=True
    )
    path = done.stdout.strip().splitlines()[-1]
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.callbacks"):
        algo = Algorithm.from_checkpoint(path)
    try:
        assert "custom_metrics" in algo.train() and algo.iteration == 2
        assert algo.config.callbacks_on_train_result is None
    finally:
        algo.stop()
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "callbacks_class '__main__:ScriptCallbacks' cannot be loaded here" in messages
    assert "callbacks_on_train_result '__main__:<lambda>' cannot be loaded here" in messages
    assert "config_overrides={'callbacks_class': ...}" in messages

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.callbacks"):
        algo = Algorithm.from_checkpoint(path, config_overrides={"callbacks_class": EndLength})
    try:
        # An iteration is 64 env steps: one may end no episode (a CartPole episode can last
        # longer), and then has no custom metric; the first that ends one has it.
        metrics = {}
        for _ in range(10):
            metrics = algo.train()["custom_metrics"]
            if metrics:
                break
        assert metrics["length_mean"] > 0, metrics
    finally:
        algo.stop()
    assert "callbacks_class" not in " ".join(record.getMessage() for record in caplog.records)

    from rltrainer.policy import Policy  # what rltrainer serve and export load

    assert Policy.from_checkpoint(path).compute_single_action([0.0, 0.0, 0.0, 0.0])[0] in (0, 1)
    evaluated = subprocess.run(
        [sys.executable, "-m", "rltrainer", "evaluate", path, "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert "mean return over 1 episode" in evaluated.stdout


class EndLength(PPOConfig().callbacks_class):
    def on_episode_end(self, *, episode, **kwargs):  # noqa: ARG002
        episode.custom_metrics["length"] = episode.get_length()
