"""Errors that mean "the user asked for something that cannot work".

They subclass ``ValueError`` (what RLlib and SB3 raise for bad configs) so callers may
catch either; the CLI turns exactly these into one line and exit status 2, while any
other exception is a bug and keeps its traceback.
"""


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
