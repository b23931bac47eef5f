"""TensorBoard event records of scalars, encoded here rather than through tensorboardX.

Importing tensorboardX's protos (and protobuf with them) takes ~0.1 s of every training
process's start-up; a scalar log needs a handful of fields of TensorBoard's ``Event``
(``tensorboard/compat/proto/event.proto``: wall_time = 1, step = 2, file_version = 3,
summary = 5, session_log = 7), ``Summary.Value`` (tag = 1, simple_value = 2) and
``SessionLog`` (status = 1, START = 1), written in protobuf's wire format and framed as a
TFRecord: the data's length, its masked CRC-32C, the data, the data's masked CRC-32C.
"""

from __future__ import annotations

import struct


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C of ``data``, rotated right by 15 bits plus a constant."""
    crc, table = 0xFFFFFFFF, _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def event(
    wall_time: float,
    step: int = 0,
    *,
    file_version: str | None = None,
    scalars: dict[str, float] | None = None,
    session_start: bool = False,
) -> bytes:
    """One serialized ``Event``: the file's version line, scalars (tag -> value, as float32
    ``simple_value``s) at ``step``, or a ``SessionLog`` START (TensorBoard then discards what
    earlier files hold at ``step`` and later). Fields at proto3's default are left out."""
    out = bytearray()
    if wall_time:
        out += b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(step & 0xFFFFFFFFFFFFFFFF)  # int64: negatives take 10 bytes
    if file_version is not None:
        out += _length_delimited(0x1A, file_version.encode())
    if scalars is not None:
        values = bytearray()
        for tag, value in scalars.items():
            value_bytes = _length_delimited(0x0A, tag.encode()) + b"\x15" + _float32(value)
            values += _length_delimited(0x0A, value_bytes)
        out += _length_delimited(0x2A, bytes(values))
    if session_start:
        out += _length_delimited(0x3A, b"\x08\x01")
    return bytes(out)


def _float32(value: float) -> bytes:
    """``value`` as a little-endian float32; beyond its range, infinity (as protobuf rounds)."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", float("inf") if value > 0 else float("-inf"))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(key: int, payload: bytes) -> bytes:
    return bytes([key]) + _varint(len(payload)) + payload
