"""Record batches (magic v2) as records: the one module that builds and decodes individual records.

The produce and fetch paths never come here (they only read batch headers, see batch.py); the
coordinators, the log cleaner and dump-log do. The cleaner's hot loop reads records with aiokafka's
compiled reader instead (storage/compaction.py) and writes the batches it changes with `build_batch`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
from .crc import crc32c
from isal import igzip
from isal.igzip_lib import IsalError

from ..protocol.varint import zigzag
from .batch import (CODECS, COMPRESSION_MASK, CONTROL, CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC,
                    TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, read_header)


def encode_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int, *, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1, attributes: int = 0) -> bytes:
    """One uncompressed batch of (key, value) records with base offset 0 (the log assigns the real
    one) and one CreateTime timestamp for all of them; non-transactional unless told otherwise.
    Coordinators write one per request."""
    return build_batch([(delta, timestamp_ms, key, value, ()) for delta, (key, value) in enumerate(records)],
                       base_timestamp=timestamp_ms, max_timestamp=timestamp_ms, last_offset_delta=len(records) - 1,
                       attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def build_batch(records, *, base_timestamp: int, max_timestamp: int, last_offset_delta: int, attributes: int,
                base_offset: int = 0, leader_epoch: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1) -> bytes:
    """A batch of `records`, each (offset delta, timestamp, key, value, headers), compressed with the
    codec in `attributes`; the layout is described below, with the decoder. The log cleaner uses it
    for what aiokafka's builder cannot write: a base timestamp that is a delete horizon."""
    body = bytearray()
    for offset_delta, timestamp, key, value, headers in records:
        record = bytearray(b"\x00")  # attributes
        record += zigzag(timestamp - base_timestamp) + zigzag(offset_delta) + _field(key) + _field(value)
        record += zigzag(len(headers))
        for name, header_value in headers:
            record += _field(name.encode()) + _field(header_value)
        body += zigzag(len(record)) + record
    return assemble_batch(bytes(body), len(records), base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                          last_offset_delta=last_offset_delta, attributes=attributes, base_offset=base_offset,
                          leader_epoch=leader_epoch, producer_id=producer_id, producer_epoch=producer_epoch,
                          base_sequence=base_sequence)


def assemble_batch(body: bytes, record_count: int, *, base_timestamp: int, max_timestamp: int,
                   last_offset_delta: int, attributes: int, base_offset: int, leader_epoch: int, producer_id: int,
                   producer_epoch: int, base_sequence: int) -> bytes:
    """A batch from its records section, uncompressed (`body`): compressed with the codec in
    `attributes`, under a header of the given fields, its CRC computed."""
    payload = compress(attributes & COMPRESSION_MASK, body) if body else b""
    header = bytearray(HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), leader_epoch, MAGIC, 0,
                                   attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                   producer_epoch, base_sequence, record_count))
    struct.pack_into(">I", header, 17, crc32c(payload, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header + payload)


def recompress(records, headers: list, codec: int) -> tuple[bytes, list]:
    """A topic's compression.type: the record set with each data batch in `codec`, its records
    section decompressed and compressed again, never parsed record by record. Raises CorruptRecords."""
    out, converted, position = bytearray(), [], 0
    for header in headers:
        batch = records[position:position + header.size]
        position += header.size
        if header.attributes & COMPRESSION_MASK != codec and not header.is_control:
            body = decompress(header.attributes & COMPRESSION_MASK, bytes(batch[HEADER_SIZE:]))
            batch = assemble_batch(body, header.record_count, base_timestamp=header.base_timestamp,
                                   max_timestamp=header.max_timestamp, last_offset_delta=header.last_offset_delta,
                                   attributes=header.attributes & ~COMPRESSION_MASK | codec,
                                   base_offset=header.base_offset, leader_epoch=header.leader_epoch,
                                   producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                                   base_sequence=header.base_sequence)
        out += batch
        converted.append(read_header(batch))
    return bytes(out), converted


def compress(codec: int, data: bytes) -> bytes:
    """A records section compressed as Kafka's clients do it (snappy in xerial's framing, LZ4 frames
    with independent blocks), at Kafka's default levels but gzip's and LZ4's."""
    name = CODECS.get(codec)
    if name == "none":
        return data
    if name == "gzip":
        # ISA-L's deflate at its best level: 3-20 times zlib's level 6 (Kafka's), within a few percent
        # of its size (smaller on some data, 5 % larger on JSON change events).
        return igzip.compress(data, compresslevel=3, mtime=0)
    if name == "snappy":
        from aiokafka.codec import snappy_encode  # (at first use: the aiokafka package costs 80 ms to import)
        return snappy_encode(data)
    if name == "lz4":
        # The fast level: ten times Kafka's level 9 (LZ4HC) for about a tenth more bytes.
        compressor = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if name == "zstd":
        from aiokafka.codec import zstd_encode  # (as snappy's)
        return zstd_encode(data)
    raise CorruptRecords(f"unknown compression codec {codec}")


def _field(data: bytes | None) -> bytes:
    return b"\x01" if data is None else zigzag(len(data)) + data  # -1 zigzags to 1: null


def encode_control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                         timestamp_ms: int) -> bytes:
    """A transaction marker (the control record layout is described below, with the decoder)."""
    return encode_batch([(_CONTROL_KEY.pack(0, 1 if commit else 0), _CONTROL_VALUE.pack(0, coordinator_epoch))],
                        timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                        attributes=TRANSACTIONAL | CONTROL)


# -- decoding ----------------------------------------------------------------------------------
#
# A batch's records section (after the 61-byte header, see batch.py) is compressed as a whole with
# the codec in attributes bits 0-2. Decompressed, it holds `record count` records, Kafka's
# DefaultRecord (varints are zigzag-encoded):
#
#     varint length          bytes after this field
#     int8   attributes      unused
#     varlong timestamp delta  from the batch's base timestamp
#     varint offset delta      from the batch's base offset
#     varint key length (-1: null), key
#     varint value length (-1: null), value
#     varint header count, then per header: varint key length, key (UTF-8), varint value length, value
#
# A control batch (transaction marker) holds one record whose key is (int16 version, int16 type:
# 0 abort, 1 commit) and whose value is (int16 version, int32 coordinator epoch).

_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # Java clients frame snappy data in xerial's stream format
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class CorruptRecords(ValueError):
    """A batch's records do not decode (bad compression, lengths that do not add up)."""


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    sequence: int  # -1 unless the batch is idempotent


@dataclass(frozen=True, slots=True)
class ControlMarker:
    commit: bool
    coordinator_epoch: int


def decode_batch(batch) -> list[DecodedRecord]:
    """The records of one whole batch (header included, as stored in a segment), decompressed.
    LogAppendTime batches carry their append time on every record, as Kafka's readers report it."""
    header = read_header(batch)
    raw = decompress(header.attributes & COMPRESSION_MASK, bytes(memoryview(batch)[HEADER_SIZE : header.size]))
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_LOG_APPEND else None
    records, pos = [], 0
    try:
        for _ in range(header.record_count):
            length, pos = read_varint(raw, pos)
            end = pos + length
            timestamp_delta, p = read_varint(raw, pos + 1)
            offset_delta, p = read_varint(raw, p)
            key, p = _read_bytes(raw, p)
            value, p = _read_bytes(raw, p)
            count, p = read_varint(raw, p)
            headers = []
            for _ in range(count):
                name, p = _read_bytes(raw, p)
                header_value, p = _read_bytes(raw, p)
                headers.append(((name or b"").decode("utf-8", "replace"), header_value))
            if p != end:
                raise CorruptRecords(f"record at byte {pos} of the records section declares {length} bytes, holds {p - pos}")
            sequence = header.base_sequence + offset_delta if header.base_sequence >= 0 else -1
            records.append(DecodedRecord(header.base_offset + offset_delta,
                                         log_append_time if log_append_time is not None
                                         else header.base_timestamp + timestamp_delta,
                                         key, value, tuple(headers), sequence))
            pos = end
    except IndexError:
        raise CorruptRecords(f"records section ends inside record {len(records)} of {header.record_count}") from None
    if pos != len(raw):
        raise CorruptRecords(f"{len(raw) - pos} bytes left after the batch's {header.record_count} records")
    return records


def control_marker(record: DecodedRecord) -> ControlMarker | None:
    """The transaction marker a control batch's record holds (None when it is not one)."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        return None
    _, kind = _CONTROL_KEY.unpack_from(record.key)
    if kind not in (0, 1):
        return None
    value = record.value or b""
    epoch = _CONTROL_VALUE.unpack_from(value)[1] if len(value) >= _CONTROL_VALUE.size else -1
    return ControlMarker(commit=kind == 1, coordinator_epoch=epoch)


def decompress(codec: int, data: bytes) -> bytes:
    """The records section of a batch compressed with `codec` (attributes bits 0-2)."""
    if codec == 0:
        return data
    name = CODECS.get(codec)
    if name is None:
        raise CorruptRecords(f"unknown compression codec {codec}")
    if name == "gzip":
        try:
            return igzip.decompress(data)  # (ISA-L's inflate: a third faster than zlib's)
        except (OSError, EOFError, IsalError) as exc:
            raise CorruptRecords(f"gzip data does not decompress: {exc}") from None
    try:
        if name == "snappy":
            return _snappy(data)
        if name == "lz4":
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecords(f"{name} data does not decompress: {exc}") from None


def _snappy(data: bytes) -> bytes:
    """Raw snappy (librdkafka), or xerial's framing (Java clients): 16-byte header, then blocks of
    (int32 length, raw snappy)."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = bytearray(), 16
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        out += cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return bytes(out)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """A zigzag varint (or varlong) at `pos`: (value, position after it)."""
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecords(f"varint at byte {pos} is longer than 10 bytes")


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecords(f"a field of {length} bytes at byte {pos} runs past the records section")
    return bytes(buf[pos : pos + length]), pos + length
