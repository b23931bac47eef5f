"""The TensorBoard records ``rltrainer.utils.tfevents`` encodes are byte for byte tensorboardX's."""

from __future__ import annotations

import pytest

from rltrainer.utils import tfevents

tensorboardx = pytest.importorskip("tensorboardX")
from tensorboardX.proto.event_pb2 import Event, SessionLog  # noqa: E402
from tensorboardX.proto.summary_pb2 import Summary  # noqa: E402
from tensorboardX.record_writer import masked_crc32c  # noqa: E402

SCALARS = {
    "rltrainer/episode_return_mean": 21.5,
    "rltrainer/cur_lr": 3e-4,
    "rltrainer/zero": 0.0,
    "é/x": -1e40,
}


def expected_scalars(wall_time: float, step: int) -> bytes:
    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in SCALARS.items()]
    return Event(wall_time=wall_time, step=step, summary=Summary(value=values)).SerializeToString()


@pytest.mark.parametrize("step", [0, 1, 300, 2**40, -5])
def test_scalars_are_tensorboardx_bytes(step: int) -> None:
    assert tfevents.event(1795851161.375, step, scalars=SCALARS) == expected_scalars(1795851161.375, step)


def test_file_version_and_session_start_are_tensorboardx_bytes() -> None:
    version = Event(wall_time=12.5, file_version="brain.Event:2").SerializeToString()
    assert tfevents.event(12.5, file_version="brain.Event:2") == version
    start = Event(wall_time=12.5, step=7, session_log=SessionLog(status=SessionLog.START))
    assert tfevents.event(12.5, 7, session_start=True) == start.SerializeToString()


@pytest.mark.parametrize("data", [b"", b"a", bytes(range(256)) * 3])
def test_record_checksum_is_tensorboardx(data: bytes) -> None:
    assert tfevents.masked_crc32c(data) == masked_crc32c(data)
    record = tfevents.record(data)
    assert record[12:-4] == data
    assert int.from_bytes(record[-4:], "little") == masked_crc32c(data)
