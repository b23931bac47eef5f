"""What ``.debugging()`` sets in every process of a run: the ``rltrainer`` log level and seeds.

The driver applies ``log_level`` when the config sets it and seeds its RNGs when the algorithm
is built. Env runners and learners call ``apply_debugging`` when they are constructed, so
Ray actors (fresh processes) get the same level and seeded RNGs too. An actor's records go
to its stderr, which Ray forwards to the driver (``log_to_driver``), prefixed with the
actor's class and pid.
"""

from __future__ import annotations

import logging
import random
import sys
from typing import Any

#: The record format of the ``rltrainer`` command and of Ray actors' records.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def set_log_level(level: str, in_actor: bool = False) -> None:
    """Set the ``rltrainer`` logger's level (``WARN`` means ``WARNING``). In a Ray actor, whose
    process has no logging handler, also give the logger one writing to stderr."""
    log = logging.getLogger("rltrainer")
    log.setLevel({"WARN": "WARNING"}.get(level, level))
    if in_actor and not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        log.addHandler(handler)


def seed_globals(seed: int) -> None:
    """Seed Python's, numpy's and torch's global RNGs."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def in_ray_actor() -> bool:
    """Whether this code runs inside a Ray actor (never imports Ray when it is not loaded)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    return ray.get_runtime_context().get_actor_id() is not None


def apply_debugging(config: Any, seed_offset: int = 0) -> None:
    """``config.log_level`` here; in a Ray actor also seed the global RNGs with
    ``config.seed + seed_offset`` (the driver seeds its own when the algorithm is built)."""
    actor = in_ray_actor()
    set_log_level(config.log_level, in_actor=actor)
    if actor and config.seed is not None:
        seed_globals(config.seed + seed_offset)


__all__ = ["LOG_FORMAT", "apply_debugging", "in_ray_actor", "seed_globals", "set_log_level"]
