"""Record batch (magic v2) header: the only part of a batch the produce and fetch paths read.

Layout (big-endian), Kafka's DefaultRecordBatch:

    offset  size  field
    0       8     base offset               patched by the broker on append
    8       4     batch length              bytes after this field
    12      4     partition leader epoch    patched by the broker on append
    16      1     magic (2)
    17      4     CRC32C of bytes 21..end    (attributes onward; so the two patches above keep it valid)
    21      2     attributes: bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control,
                    6 delete horizon (KIP-534: the base timestamp is then the time the log cleaner
                    may remove the batch's tombstones or transaction marker)
    23      4     last offset delta
    27      8     base timestamp
    35      8     max timestamp
    43      8     producer id
    51      2     producer epoch
    53      4     base sequence
    57      4     record count
    61            records (possibly compressed), never decoded here

A batch the log cleaner rewrote keeps its base offset and last offset delta (so offsets never
change) and holds fewer records: record count ≤ last offset delta + 1, and 0 for the empty batch
kept so a producer's last sequence number survives.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .crc import crc32c

from ..protocol.errors import CorruptRecord, InvalidRecord, RecordTooLarge, UnsupportedCompression

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset + batch length
CRC_START = 21
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_LEADER_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_TIMESTAMPS = struct.Struct(">qq")
_CRC = struct.Struct(">I")
_BATCH_LENGTH = struct.Struct(">i")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> str:
        return CODECS.get(self.attributes & COMPRESSION_MASK, "unknown")

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)


def read_header(buf, position: int = 0) -> BatchHeader:
    return BatchHeader(*HEADER.unpack_from(buf, position))


def crc_matches(buf, position: int, header: BatchHeader) -> bool:
    return crc32c(memoryview(buf)[position + CRC_START : position + header.size]) == header.crc


def whole_batches_length(records) -> int:
    """How many leading bytes of a fetched record set are whole batches: a fetch response may end
    inside a batch (Kafka's brokers cut at the size limit), and readers drop that tail."""
    position, end = 0, len(records)
    while end - position >= LOG_OVERHEAD:
        (length,) = _BATCH_LENGTH.unpack_from(records, position + 8)
        if position + LOG_OVERHEAD + length > end:
            break
        position += LOG_OVERHEAD + length
    return position


def validate_produce(records: bytes, max_batch_bytes: int, cleaned: bool = False) -> list[BatchHeader]:
    """Headers of the batches in a produce request's record set, each checked for framing, magic,
    size, compression codec and CRC32C. Raises the error the partition should answer with.
    `cleaned`: batches copied from a leader's log may be ones the log cleaner rewrote."""
    headers = []
    position, end = 0, len(records)
    if end == 0:
        raise InvalidRecord("produce request carries no record batch")
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptRecord(f"record set ends inside a batch header at byte {position}")
        header = read_header(records, position)
        if header.magic != MAGIC:
            raise InvalidRecord(f"batch at byte {position} has magic {header.magic}; only v2 batches are accepted")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > end:
            raise CorruptRecord(f"batch at byte {position} declares length {header.batch_length}, beyond the record set")
        if header.size > max_batch_bytes:
            raise RecordTooLarge(f"batch of {header.size} bytes exceeds max.message.bytes={max_batch_bytes}")
        if header.attributes & COMPRESSION_MASK not in CODECS:
            raise UnsupportedCompression(f"unknown compression codec {header.attributes & COMPRESSION_MASK}")
        if (header.record_count < 0 or header.last_offset_delta < header.record_count - 1 if cleaned
                else header.record_count <= 0 or header.last_offset_delta != header.record_count - 1):
            raise InvalidRecord(
                f"batch at byte {position} has {header.record_count} records but last offset delta "
                f"{header.last_offset_delta}"
            )
        if not crc_matches(records, position, header):
            raise CorruptRecord(f"batch at byte {position} fails its CRC32C check")
        headers.append(header)
        position += header.size
    return headers


def assign_offsets(buf: bytearray, headers: list[BatchHeader], first_offset: int, leader_epoch: int,
                   append_time_ms: int | None) -> list[BatchHeader]:
    """Patch base offsets, leader epochs and (LogAppendTime topics) timestamps in place; return the
    headers as written. Only the timestamp patch changes CRC-covered bytes, so only it recomputes the CRC."""
    patched = []
    position, offset = 0, first_offset
    for header in headers:
        _BASE_OFFSET.pack_into(buf, position, offset)
        _LEADER_EPOCH.pack_into(buf, position + 12, leader_epoch)
        header = header._replace(base_offset=offset, leader_epoch=leader_epoch)
        if append_time_ms is not None:
            attributes = header.attributes | TIMESTAMP_TYPE_LOG_APPEND
            struct.pack_into(">h", buf, position + 21, attributes)
            _TIMESTAMPS.pack_into(buf, position + 27, append_time_ms, append_time_ms)
            crc = crc32c(memoryview(buf)[position + CRC_START : position + header.size])
            _CRC.pack_into(buf, position + 17, crc)
            header = header._replace(attributes=attributes, base_timestamp=append_time_ms,
                                     max_timestamp=append_time_ms, crc=crc)
        patched.append(header)
        offset += header.last_offset_delta + 1
        position += header.size
    return patched
