"""Offline data: writing sampled trajectories (``.offline_data(output=...)``), reading recorded
ones (``input_=PATH``), and the external application API (``input_="server"``, ``PolicyClient``).

Imported on first use where it matters: the writer and reader import no torch.
"""

from rltrainer.offline.input_reader import InputReader, IOContext
from rltrainer.offline.output_writer import OUTPUT_FORMATS, OutputWriter, make_output_writer

__all__ = ["OUTPUT_FORMATS", "IOContext", "InputReader", "OutputWriter", "make_output_writer"]
