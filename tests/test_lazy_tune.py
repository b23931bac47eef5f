"""Ray Tune is imported only when it is used, and the algorithms are still Tune Trainables then
(``tests/test_tune.py`` runs them in ``tune.Tuner`` by class and by name)."""

from __future__ import annotations

import pytest

from tests.fresh_python import python_output


def test_training_without_tune_never_imports_it() -> None:
    out = python_output(
        "import sys, tempfile\n"
        "from rltrainer.algorithms.ppo import PPOConfig\n"
        "config = PPOConfig().environment('CartPole-v1').training(train_batch_size=64, minibatch_size=32,"
        " num_epochs=1).reporting(storage_path=tempfile.mkdtemp())\n"
        "with config.build() as algo:\n"
        "    algo.train()\n"
        "    algo.save()\n"
        "print(sorted(m for m in sys.modules if m == 'ray.tune' or m.startswith('ray.tune.')))\n"
    )
    assert out == "[]"


@pytest.mark.parametrize("tune_first", [False, True], ids=["algorithm-first", "tune-first"])
def test_algorithms_are_trainables_once_tune_is_imported(tune_first: bool) -> None:
    imports = ["from rltrainer.algorithms.ppo import PPO", "from ray.tune import Trainable"]
    if tune_first:
        imports.reverse()
    out = python_output(
        "\n".join(imports) + "\n"
        "from rltrainer.algorithms.dqn import DQN\n"
        "from rltrainer.algorithms.algorithm import Algorithm\n"
        "print(issubclass(PPO, Trainable), issubclass(DQN, Trainable), PPO.train is Algorithm.train)\n"
    )
    assert out == "True True True"


def test_the_tune_keys_named_here_are_tunes() -> None:
    from ray.tune import result

    from rltrainer.algorithms import trainable

    for key in ("TRIAL_INFO", "STDOUT_FILE", "STDERR_FILE", "SHOULD_CHECKPOINT"):
        assert getattr(trainable, key) == getattr(result, key)


def test_an_algorithm_without_tune_answers_what_a_trainable_does(tmp_path) -> None:
    out = python_output(
        "import sys\n"
        "from rltrainer.algorithms.ppo import PPOConfig\n"
        f"config = PPOConfig().environment('CartPole-v1').reporting(storage_path={str(tmp_path)!r})\n"
        "with config.build() as algo:\n"
        "    print(algo.trial_id, algo.trial_name, algo.get_config() is algo.config,"
        " 'ray.tune' in sys.modules)\n"
    )
    assert out == "default default True False"
