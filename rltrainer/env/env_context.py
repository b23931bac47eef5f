"""``EnvContext``: what an env creator receives (RLlib's shape)."""

from __future__ import annotations

from typing import Any


class EnvContext(dict):
    """The user's ``env_config`` dict, plus where this env copy lives.

    Creators can read settings as dict items and use ``worker_index`` /
    ``vector_index`` to vary each copy (e.g. seeds or curriculum levels).
    """

    def __init__(
        self,
        env_config: dict[str, Any],
        worker_index: int = 0,
        vector_index: int = 0,
        num_workers: int = 0,
        remote: bool = False,
    ) -> None:
        super().__init__(env_config)
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.num_workers = num_workers
        self.remote = remote

    def copy_with_overrides(
        self,
        env_config: dict[str, Any] | None = None,
        worker_index: int | None = None,
        vector_index: int | None = None,
    ) -> EnvContext:
        """A copy with some fields replaced."""
        return EnvContext(
            dict(self) if env_config is None else env_config,
            self.worker_index if worker_index is None else worker_index,
            self.vector_index if vector_index is None else vector_index,
            self.num_workers,
            self.remote,
        )

    def __repr__(self) -> str:
        return (
            f"EnvContext({dict(self)!r}, worker_index={self.worker_index}, "
            f"vector_index={self.vector_index}, num_workers={self.num_workers})"
        )
