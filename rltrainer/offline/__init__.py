"""Offline data: writing the sampled trajectories (``.offline_data(output=...)``)."""

from rltrainer.offline.output_writer import OUTPUT_FORMATS, OutputWriter, make_output_writer

__all__ = ["OUTPUT_FORMATS", "OutputWriter", "make_output_writer"]
