"""``.offline_data()``: where training batches come from (``input_``) and where sampled ones are
written (``output``); what offline input cannot be combined with."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, PrivateAttr, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

KEYS = (
    "input_",
    "input_config",
    "shuffle_buffer_size",
    "actions_in_input_normalized",
    "output",
    "output_config",
    "output_max_file_size",
)


class OfflineDataSettings(ConfigSection):
    """``offline_data()``'s settings."""

    input_: Any = "sampler"
    """Where training batches come from: ``"sampler"`` (the envs), a path, glob, directory or
    ``s3://`` prefix of recorded Parquet / JSON-lines files (or a list of those), or
    ``{source: probability}`` mixing sources (see ``rltrainer.offline.input_reader``)."""
    input_config: dict[str, Any] = Field(default_factory=dict)
    """``{"format": "parquet" | "json"}``: read every input file as that format (default: by
    each file's suffix, .parquet or .jsonl/.json)."""
    shuffle_buffer_size: int = Field(0, ge=0)
    """Rows of recorded episode pieces held to draw from at random (0: read in file order)."""
    actions_in_input_normalized: bool = False
    """Box actions in the input are already the policy's (normalized to [-1, 1], as rltrainer's
    output writer records them); ``False``: they are in the env's units and get normalized."""
    output: str | None = None
    """Write every sampled batch to: ``None`` (nowhere), ``"logdir"`` (``<trial folder>/output``),
    a directory, or ``"s3://bucket/prefix"`` (see ``rltrainer.offline.output_writer``)."""
    output_config: dict[str, Any] = Field(default_factory=dict)
    """``{"format": "parquet" | "json", "compression": ...}``; Parquet (snappy) by default,
    ``"json"`` writes JSON lines; Parquet codecs: snappy, zstd, gzip, brotli, lz4, none."""
    output_max_file_size: int = Field(64 * 1024 * 1024, ge=1)
    """Bytes after which an output file is complete and the next one begins."""

    # ``output`` as the driver resolved it ("logdir" -> <trial folder>/output), set by the algorithm.
    _output_path: str | None = PrivateAttr(default=None)
    # ``input_`` with its files listed, set by the algorithm in the driver (resolve_input).
    _input_sources: list[Any] | None = PrivateAttr(default=None)

    def offline_data(self, **kwargs: Any) -> Self:
        """Where and how env runners write the trajectories they sample."""
        return self._update("offline_data", kwargs)

    def get_output_path(self) -> str | None:
        """Where env runners write sampled batches: ``output`` as the algorithm resolved it in the
        driver (``"logdir"``: ``<trial folder>/output``; ``None`` before one was built)."""
        if self.output == "logdir":
            return self._output_path
        return self._output_path or self.output

    @property
    def is_offline(self) -> bool:
        """Whether training batches come from ``input_`` (files, a policy server, a function)
        rather than, or as well as, the envs."""
        from rltrainer.offline.input_sources import SAMPLER

        return not isinstance(self.input_, str) or self.input_ != SAMPLER

    @property
    def trains_without_env(self) -> bool:
        """``input_`` has no ``"sampler"`` source and the spaces are given: no env is needed."""
        from rltrainer.offline.input_sources import SAMPLER, parse_input

        sampled = any(isinstance(s, str) and s == SAMPLER for s, _ in parse_input(self.input_))
        return not sampled and self.observation_space is not None and self.action_space is not None

    def get_input_sources(self) -> list[Any]:
        """``input_`` as ``InputSource``s with their files listed (listed here if the algorithm
        has not done it in the driver yet)."""
        if self._input_sources is None:
            from rltrainer.offline.input_sources import resolve_input

            self._input_sources = resolve_input(self.input_, self.input_config, self.storage_options)
        return self._input_sources

    def _check_offline_data(self) -> None:
        """What offline input cannot be combined with (files hold filtered, flattened rows)."""
        from rltrainer.offline.input_sources import SAMPLER, SERVER, parse_input

        if self.off_policy_estimation_methods and not self._recorded_input():
            raise ConfigError(
                "off_policy_estimation_methods estimate from recorded episodes: set "
                "offline_data(input_=PATH) or evaluation_config={'input_': PATH}"
            )
        if not self.is_offline:
            return
        if self.env is None and self.evaluation_interval and not self.off_policy_estimation_methods:
            raise ConfigError(
                "evaluation runs episodes in an env, and this config has none (env=None): set "
                ".environment(ENV), off_policy_estimation_methods (estimates from recorded episodes), "
                "or evaluation_interval=None"
            )
        files = [
            s for s, _ in parse_input(self.input_) if isinstance(s, str | list) and s not in (SAMPLER, SERVER)
        ]
        if files and self.observation_filter != "NoFilter":
            raise ConfigError(
                f"offline_data(input_=...) reads observations as they were recorded, so "
                f"observation_filter={self.observation_filter!r} cannot apply to them; set "
                "observation_filter='NoFilter'"
            )
        if self.model.use_lstm:
            raise ConfigError(
                "offline_data(input_=...) does not feed recurrent policies (model.use_lstm=True): "
                "recorded rows carry no LSTM states; train from input_='sampler' or without use_lstm"
            )

    def _recorded_input(self) -> bool:
        """Whether the training or the evaluation ``input_`` names recorded files."""
        from rltrainer.offline.input_sources import SAMPLER, SERVER, parse_input

        overrides = self.evaluation_config or {}
        inputs = [self.input_, overrides.get("input_", overrides.get("input"))]
        return any(
            isinstance(source, str | list) and source not in (SAMPLER, SERVER)
            for input_ in inputs
            if input_ is not None
            for source, _ in parse_input(input_)
        )

    @field_validator("output")
    @classmethod
    def _output(cls, output: str | None) -> str | None:
        if output is not None and not output.strip():
            raise ValueError("must be None, 'logdir', a directory or 's3://bucket/prefix', not empty")
        return output

    @field_validator("input_", mode="before")
    @classmethod
    def _input(cls, input_: Any) -> Any:
        from rltrainer.offline.input_sources import parse_input

        parse_input(input_)
        return input_

    @field_validator("input_config")
    @classmethod
    def _input_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.input_sources import check_input_config

        return check_input_config(config)

    @field_validator("output_config")
    @classmethod
    def _output_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.output_writer import check_output_config

        return check_output_config(config)
