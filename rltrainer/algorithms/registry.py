"""Algorithm names (as the CLI, checkpoints and the operator spell them) -> classes, imported lazily.

Each algorithm's config lives in a module that imports no torch, so ``get_config_class``
serves the operator, which validates experiments without torch installed. Each policy lives
in a module that imports neither the algorithm nor Ray Tune, so ``get_policy_class`` serves
env-runner and learner actors (importing Tune took 0.7 s of each actor's start).
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from rltrainer.errors import ConfigError


class Registered(NamedTuple):
    """Where an algorithm, its config and the policy its env runners act with are defined, each
    as ``"module:Class"`` (the policy is the algorithm's ``policy_class``)."""

    algorithm: str
    config: str
    policy: str = "rltrainer.policy.policy:Policy"


ALGORITHMS: dict[str, Registered] = {
    "PPO": Registered("rltrainer.algorithms.ppo.ppo:PPO", "rltrainer.algorithms.ppo.ppo_config:PPOConfig"),
    "DQN": Registered(
        "rltrainer.algorithms.dqn.dqn:DQN",
        "rltrainer.algorithms.dqn.dqn_config:DQNConfig",
        "rltrainer.algorithms.dqn.dqn_policy:DQNPolicy",
    ),
    "SAC": Registered(
        "rltrainer.algorithms.sac.sac:SAC",
        "rltrainer.algorithms.sac.sac_config:SACConfig",
        "rltrainer.algorithms.sac.sac_policy:SACPolicy",
    ),
    "MARWIL": Registered(
        "rltrainer.algorithms.marwil.marwil:MARWIL", "rltrainer.algorithms.marwil.marwil_config:MARWILConfig"
    ),
    "BC": Registered(
        "rltrainer.algorithms.marwil.marwil:BC", "rltrainer.algorithms.marwil.marwil_config:BCConfig"
    ),
    "DDPG": Registered(
        "rltrainer.algorithms.ddpg.ddpg:DDPG",
        "rltrainer.algorithms.ddpg.ddpg_config:DDPGConfig",
        "rltrainer.algorithms.ddpg.ddpg_policy:DDPGPolicy",
    ),
    "TD3": Registered(
        "rltrainer.algorithms.ddpg.ddpg:TD3",
        "rltrainer.algorithms.ddpg.ddpg_config:TD3Config",
        "rltrainer.algorithms.ddpg.ddpg_policy:DDPGPolicy",
    ),
    "CQL": Registered(
        "rltrainer.algorithms.cql.cql:CQL",
        "rltrainer.algorithms.cql.cql_config:CQLConfig",
        "rltrainer.algorithms.cql.cql_policy:CQLPolicy",
    ),
    "A2C": Registered(
        "rltrainer.algorithms.a2c.a2c:A2C",
        "rltrainer.algorithms.a2c.a2c_config:A2CConfig",
        "rltrainer.algorithms.a2c.a2c_policy:A2CPolicy",
    ),
    "PG": Registered(
        "rltrainer.algorithms.pg.pg:PG",
        "rltrainer.algorithms.pg.pg_config:PGConfig",
        "rltrainer.algorithms.pg.pg_policy:PGPolicy",
    ),
    "APEX": Registered(
        "rltrainer.algorithms.apex.apex:ApexDQN",
        "rltrainer.algorithms.apex.apex_config:ApexDQNConfig",
        "rltrainer.algorithms.dqn.dqn_policy:DQNPolicy",
    ),
    "APEX_DDPG": Registered(
        "rltrainer.algorithms.apex.apex:ApexDDPG",
        "rltrainer.algorithms.apex.apex_config:ApexDDPGConfig",
        "rltrainer.algorithms.ddpg.ddpg_policy:DDPGPolicy",
    ),
    "A3C": Registered(
        "rltrainer.algorithms.a3c.a3c:A3C",
        "rltrainer.algorithms.a3c.a3c_config:A3CConfig",
        "rltrainer.algorithms.a2c.a2c_policy:A2CPolicy",
    ),
    "ES": Registered("rltrainer.algorithms.es.es:ES", "rltrainer.algorithms.es.es_config:ESConfig"),
    "ARS": Registered("rltrainer.algorithms.es.es:ARS", "rltrainer.algorithms.es.es_config:ARSConfig"),
    "IMPALA": Registered(
        "rltrainer.algorithms.impala.impala:IMPALA", "rltrainer.algorithms.impala.impala_config:IMPALAConfig"
    ),
    "APPO": Registered(
        "rltrainer.algorithms.appo.appo:APPO", "rltrainer.algorithms.appo.appo_config:APPOConfig"
    ),
}


def get_algorithm_class(name: str) -> type:
    """The algorithm class called ``name`` (case-insensitive); imports torch."""
    return _load(_registered(name).algorithm)


def get_config_class(name: str) -> type:
    """The config class of the algorithm called ``name`` (case-insensitive), without importing
    the algorithm (nor torch)."""
    return _load(_registered(name).config)


def get_policy_class(name: str) -> type:
    """The policy class the algorithm called ``name`` acts and learns with, without importing the
    algorithm (nor Ray Tune)."""
    return _load(_registered(name).policy)


def _registered(name: str) -> Registered:
    key = {k.upper(): k for k in ALGORITHMS}.get(str(name).upper())
    if key is None:
        raise ConfigError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[key]


def _load(path: str) -> type:
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)
