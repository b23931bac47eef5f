"""Errors that mean "the user asked for something that cannot work".

They subclass ``ValueError`` (what RLlib and SB3 raise for bad configs) so callers may
catch either; the CLI turns exactly these into one line and exit status 2, while any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import traceback

#: Attribute an exception raised in another process (a ``remote_worker_envs`` actor) carries:
#: where it was raised, since tracebacks do not travel with pickled exceptions.
RAISED_AT = "_rltrainer_raised_at"


def raised_at(err: BaseException) -> str:
    """`` (at file:line in function)`` of the innermost frame outside gymnasium, numpy and
    rltrainer (the user's env), else of the innermost frame; for an exception from another
    process, where it was raised there (``RAISED_AT``)."""
    recorded = getattr(err, RAISED_AT, None)
    if isinstance(recorded, str):
        return recorded
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    libraries = ("/gymnasium/", "/numpy/", f"{os.sep}rltrainer{os.sep}", f"{os.sep}functools.py")
    own = [frame for frame in frames if not any(part in frame.filename for part in libraries)]
    frame = (own or frames)[-1]
    return f" (at {frame.filename}:{frame.lineno} in {frame.name})"


class RLTrainerError(ValueError):
    """Base class for user-facing errors."""


class ConfigError(RLTrainerError):
    """An invalid algorithm config: unknown key, wrong type or inconsistent values."""


class EnvError(RLTrainerError):
    """An env spec that cannot be resolved or created."""


class CheckpointError(RLTrainerError):
    """A checkpoint that is missing, corrupted, or of an unknown format."""


class ResourceError(RLTrainerError):
    """The cluster cannot provide the resources an algorithm asks for."""


class NumericalError(RLTrainerError):
    """NaN or infinity where training cannot go on: in an env's observations or rewards (naming
    the env runner, sub-env and step) or in a loss (naming its non-finite terms)."""


class WorkerError(RuntimeError):
    """A remote env runner or learner died or did not answer in time."""


class CallbackError(RLTrainerError):
    """A user callback raised; the message names the hook, the callbacks class and where it ran."""


class InputError(RLTrainerError):
    """Offline input (``offline_data(input_=...)``) that cannot be read: no files, a file that is
    not Parquet or JSON lines, or rows that do not fit the env's spaces (the message names the
    file and what is wrong)."""
