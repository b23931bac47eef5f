"""An env runner's ``input_``: which source each fragment comes from (``OfflineInput``), with a
reader for each source that is not the sampler: recorded files (``InputReader``), a Minari
dataset (``MinariReader``), a policy server (``serve_runner``) or the user's function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.errors import ConfigError
from rltrainer.offline.input_reader import InputReader
from rltrainer.offline.input_sources import InputSource, IOContext
from rltrainer.offline.minari_data import MinariReader
from rltrainer.offline.policy_server import serve_runner
from rltrainer.offline.rows import RowLayout


class OfflineInput:
    """An env runner's ``input_``: which source each fragment comes from, and their readers."""

    def __init__(self, sources: list[InputSource], make_reader: Callable[[InputSource], Any], seed: Any):
        self.sources = sources
        self.readers: list[Any] = []
        try:
            for source in sources:
                self.readers.append(None if source.is_sampler else make_reader(source))
        except BaseException:
            self.stop()
            raise
        self.probabilities = np.array([s.probability for s in sources])
        self.rng = np.random.default_rng(seed)

    def next(self, num_rows: int) -> tuple[Any, list[Any]] | None:
        """``(rollout, ended episodes)`` of ``num_rows`` rows from a reader (a policy server also
        reports the episodes its clients ended), or ``None``: sample this fragment from the envs."""
        index = 0 if len(self.sources) == 1 else int(self.rng.choice(len(self.sources), p=self.probabilities))
        reader = self.readers[index]
        if reader is None:
            return None
        rollout = reader.next(num_rows)
        pop = getattr(reader, "pop_episodes", None)
        return rollout, (pop() if pop is not None else [])

    def stop(self) -> None:
        """Stop the readers that hold something (a policy server's socket and thread)."""
        for reader in self.readers:
            stop = getattr(reader, "stop", None)
            if stop is not None:
                stop()


def make_offline_input(config: Any, runner: Any) -> OfflineInput | None:
    """The ``OfflineInput`` of a training env runner (``None`` when it only samples)."""
    sources = config.get_input_sources()
    if all(source.is_sampler for source in sources):
        return None
    if runner.worker_index == 0 and config.num_env_runners > 0:
        return None  # the remote runners sample (and serve, each on its own port); the driver's does not
    policy = runner.policy
    normalize = (
        isinstance(runner.action_space, spaces.Box)
        and config.normalize_actions
        and not config.actions_in_input_normalized
    )
    layout = RowLayout(
        observation_space=runner.observation_space,
        action_space=runner.action_space,
        obs_size=policy.preprocessor.size,
        obs_dtype=policy.preprocessor.dtype,
        convert_actions=policy.from_env_actions if normalize else None,
        clip_rewards=runner.clip_rewards,
    )
    seed = None if config.seed is None else [config.seed, runner.worker_index, 1]

    def make_reader(source: InputSource) -> Any:
        if source.is_server:
            return serve_runner(runner, config.input_config)
        if source.minari_dataset is not None:
            return MinariReader(
                source.minari_dataset,
                layout,
                runner.policy,
                shuffle_buffer_size=config.shuffle_buffer_size,
                worker_index=runner.worker_index,
                seed=None if config.seed is None else config.seed + sources.index(source),
            )
        if source.make_reader is not None:
            ioctx = IOContext(config.get_output_path(), config, runner.worker_index, runner)
            reader = source.make_reader(ioctx)
            if not callable(getattr(reader, "next", None)):
                raise ConfigError(
                    f"offline_data(): input_ function {source.name!r} returned {type(reader).__name__}, "
                    "which has no next(num_rows) returning a Rollout (e.g. PolicyServerInput)"
                )
            return reader
        return InputReader(
            source.files,
            layout,
            fmt=config.input_config.get("format"),
            shuffle_buffer_size=config.shuffle_buffer_size,
            worker_index=runner.worker_index,
            seed=None if config.seed is None else config.seed + sources.index(source),
            storage_options=config.storage_options,
        )

    return OfflineInput(sources, make_reader, seed)
