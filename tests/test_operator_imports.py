"""The operator imports neither torch nor Ray: its image installs neither (images/operator).

``run_without_torch`` runs code in a subprocess where importing ``torch``, ``ray`` or
``tensorboardX`` (or any of their submodules) raises ``ImportError``; there the operator
imports, validates experiments of every algorithm with rltrainer's config classes, and leaves
them out of ``sys.modules``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from rltrainer.algorithms.registry import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = ROOT / "tests" / "operator" / "data" / "minimal.yaml"

BLOCK_TORCH_AND_RAY = """
import sys

class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "ray", "tensorboardX"):
            raise ImportError(f"{name} is blocked: the operator must not import it")
        return None

sys.meta_path.insert(0, _Blocked())
"""

# Per algorithm: config keys of its own (checked by its config class), and a stop key that only
# its learner reports (checked against the config's STAT_KEYS).
SPECS = {
    "PPO": {"config": {"lambda": 0.95, "num_sgd_iter": 4, "lr": [[0, 1e-3], [1000, 1e-4]]}, "stop": "kl"},
    "DQN": {
        "config": {
            "exploration_config": {"epsilon_timesteps": 500},
            "replay_buffer_config": {"capacity": 100},
        },
        "stop": "qf_loss",
    },
    "SAC": {"config": {"optimization_config": {"actor_learning_rate": 1e-3}}, "stop": "critic_loss"},
    "DDPG": {"config": {"actor_hiddens": [64, 64], "critic_lr": 1e-3}, "stop": "mean_q"},
    "TD3": {"config": {"policy_delay": 3, "target_noise": 0.1}, "stop": "actor_loss"},
    "MARWIL": {"config": {"beta": 0.5, "input": "s3://recordings/cartpole"}, "stop": "vf_explained_var"},
    "BC": {"config": {"input": "/data/recorded", "shuffle_buffer_size": 1000}, "stop": "policy_loss"},
    "CQL": {"config": {"bc_iters": 100, "lagrangian": True, "input": "/data/recorded"}, "stop": "cql_loss"},
    "A2C": {"config": {"microbatch_size": 16, "use_gae": False, "lambda": 0.95}, "stop": "grad_gnorm"},
    "APEX": {"config": {"max_weight_sync_delay": 100, "n_step": 5}, "stop": "qf_loss"},
    "APEX_DDPG": {"config": {"max_requests_in_flight_per_env_runner": 1}, "stop": "critic_loss"},
    "A3C": {"config": {"rollout_fragment_length": 20, "entropy_coeff": 0.02}, "stop": "gradient_lag_updates"},
    "ES": {"config": {"episodes_per_batch": 100, "noise_stdev": 0.05}, "stop": "update_ratio"},
    "ARS": {"config": {"num_rollouts": 8, "rollouts_used": 4}, "stop": "grad_norm"},
    "IMPALA": {"config": {"vtrace_clip_rho_threshold": 2.0, "learner_queue_size": 4}, "stop": "mean_rho"},
    "APPO": {
        "config": {"use_kl_loss": True, "clip_param": 0.2, "lambda": 0.95},
        "stop": "num_target_updates",
    },
    "PG": {"config": {"lr": [[0, 4e-4], [9000, 1e-4]], "train_batch_size": 400}, "stop": "grad_gnorm"},
}


def run_without_torch(code: str, stdin: Any) -> Any:
    """Run ``code`` with torch and Ray unimportable, ``stdin`` as JSON; its last stdout line as JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "operator")])}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH_AND_RAY + textwrap.dedent(code)],
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def experiment(algorithm: str, config: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    body = yaml.safe_load(MINIMAL.read_text())
    body["spec"].update(algorithm=algorithm, config=copy.deepcopy(config), stop=stop)
    return body


@pytest.fixture(scope="module")
def every_algorithm_validated() -> dict[str, Any]:
    """Each algorithm's valid experiment, one with a config typo and one with a stop key it does
    not report, validated in one process without torch or Ray (a process each cost 2 s)."""
    bodies = {}
    for algorithm, spec in SPECS.items():
        stop = {spec["stop"]: 1.0, "episode_reward_mean": 100}
        bodies[f"{algorithm}/valid"] = experiment(algorithm, spec["config"], stop)
        bodies[f"{algorithm}/bad-config"] = experiment(algorithm, {**spec["config"], "gama": 0.9}, stop)
        bodies[f"{algorithm}/bad-stop"] = experiment(algorithm, spec["config"], {**stop, "reward": 1})
    return validate_without_torch(bodies)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_operator_imports_and_validates_without_torch_or_ray(
    algorithm: str, every_algorithm_validated: dict[str, Any]
) -> None:
    assert every_algorithm_validated["heavy"] == []
    problems = every_algorithm_validated["problems"]
    assert {
        case: problems[f"{algorithm}/{case}"] and problems[f"{algorithm}/{case}"][0]
        for case in ("valid", "bad-config", "bad-stop")
    } == {
        "valid": None,
        "bad-config": "spec.config.gama",
        "bad-stop": "spec.stop.reward",
    }


def validate_without_torch(bodies: dict[str, Any]) -> dict[str, Any]:
    """The operator's validation of each body, torch and Ray unimportable: ``problems`` (per
    body ``None`` or ``[field, message]``) and ``heavy``, the torch, Ray and ``users_package``
    modules imported meanwhile (the operator must import none)."""
    return run_without_torch(
        """
        import json
        import rltrainer_operator.handlers
        from rltrainer_operator.validation import InvalidSpec, validate_experiment

        problems = {}
        for name, body in json.load(sys.stdin).items():
            try:
                validate_experiment(body)
                problems[name] = None
            except InvalidSpec as err:
                problems[name] = [err.field, str(err)]
        heavy = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "ray", "users_package"))
        print(json.dumps({"problems": problems, "heavy": heavy}))
        """,
        bodies,
    )


def test_a_multi_agent_experiment_validates_without_importing_its_env_or_mapping() -> None:
    """Policies and the mapping are import paths in ``spec.config``; the operator checks them
    without importing them (the user's package is in the trainer image, not the operator's)."""
    config = {
        "policies": ["p0", "p1"],
        "policy_mapping_fn": "users_package.mapping:agent_to_policy",
        "policies_to_train": ["p0"],
    }
    stop = {"policy_reward_mean/p0": 475, "episode_reward_mean": 100}
    bodies = {
        "valid": experiment("PPO", config, stop),
        "unknown-policy": experiment("PPO", {**config, "policies_to_train": ["p9"]}, stop),
        "no-mapping": experiment("PPO", {"policies": ["p0", "p1"]}, stop),
        "impala": experiment("IMPALA", config, {"episode_reward_mean": 100}),
    }
    for body in bodies.values():
        body["spec"]["env"] = "users_package.envs:TwoArmies"
    outcome = validate_without_torch(bodies)
    assert outcome["heavy"] == []
    fields = outcome["problems"]
    assert fields["valid"] is None
    assert (
        fields["unknown-policy"][0] == "spec.config" and "unknown policy 'p9'" in fields["unknown-policy"][1]
    )
    assert "need a policy_mapping_fn" in fields["no-mapping"][1]
    assert "IMPALA trains one policy" in fields["impala"][1]


def test_configs_import_without_torch_and_still_build_their_algorithm() -> None:
    imported = run_without_torch(
        """
        import json
        from rltrainer.algorithms.ppo import PPOConfig
        from rltrainer.algorithms.dqn.dqn_config import DQNConfig
        from rltrainer.algorithms.sac import SACConfig

        print(json.dumps([c.ALGORITHM for c in (PPOConfig, DQNConfig, SACConfig)]))
        """,
        None,
    )
    assert imported == ["PPO", "DQN", "SAC"]
    from rltrainer.algorithms.ppo import PPO, PPOConfig, ppo

    assert ppo.PPOConfig is PPOConfig  # the old import path still works
    algo = PPOConfig().environment("CartPole-v1").build()
    try:
        assert isinstance(algo, PPO)
        assert PPO.result_keys() == PPOConfig.result_keys()  # one STAT_KEYS, the config's
    finally:
        algo.stop()


def test_policies_load_without_their_algorithm_or_ray_tune() -> None:
    """Env-runner and learner actors get their policy class from the registry: it is each
    algorithm's ``policy_class``, and loading it imports neither the algorithm nor Ray Tune."""
    code = textwrap.dedent(
        """
        import json, sys
        from rltrainer.algorithms.registry import ALGORITHMS, get_config_class

        policies = {name: get_config_class(name)().get_policy_class() for name in ALGORITHMS}
        heavy = sorted({"ray.tune", "rltrainer.algorithms.algorithm"} & set(sys.modules))
        paths = {name: f"{cls.__module__}:{cls.__qualname__}" for name, cls in policies.items()}
        print(json.dumps({"policies": paths, "heavy": heavy}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    outcome = json.loads(done.stdout)
    assert outcome["heavy"] == []
    from rltrainer.algorithms.registry import get_algorithm_class
    from rltrainer.policy import Policy

    for name, path in outcome["policies"].items():
        cls = getattr(get_algorithm_class(name), "policy_class", Policy)
        assert path == f"{cls.__module__}:{cls.__qualname__}", name
