"""Compressed binlog events, unpacked into the plain events they stand for.

pymysqlreplication decodes neither kind, and would drop them: the client hands their bodies here and
parses what comes out as if the server had written it inline.

- MySQL 8.0.20+ (`binlog_transaction_compression=ON`, global or per session) writes a whole
  transaction after its GTID event as one TRANSACTION_PAYLOAD event: a header of (type, length,
  value) fields in MySQL's packed-integer encoding, closed by type 0, then the compressed bytes
  (zstd), which hold the transaction's own events (BEGIN, table maps, rows, XID) back to back, each
  with its 19-byte header and no checksum.
- MariaDB 10.2+ (`log_bin_compress=ON`) compresses single QUERY and ROWS events: a QUERY's statement
  text, or a ROWS event's row images (everything after the column bitmaps), become one header byte
  (0x80 | n), the uncompressed length in n big-endian bytes, and a zlib stream.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Iterator

import zstandard

from cdc.errors import DecodeError

HEADER = struct.Struct("<IBIIIH")   # timestamp, type, server id, event size, next position, flags
HEADER_SIZE = HEADER.size           # 19

_PAYLOAD_SIZE, _COMPRESSION, _UNCOMPRESSED_SIZE = 1, 2, 3
_ZSTD, _NONE = 0, 255
_CHUNK = 1 << 20                    # bytes decompressed at a time

QUERY_COMPRESSED = 165
ROWS_COMPRESSED = {166: 23, 167: 24, 168: 25,          # MariaDB *_ROWS_COMPRESSED_EVENT_V1 -> *_ROWS_EVENT_V1
                   169: 30, 170: 31, 171: 32}          # *_ROWS_COMPRESSED_EVENT (v2) -> *_ROWS_EVENT_V2
_UPDATE_TYPES = {24, 31}


def _packed_int(data: bytes, p: int) -> tuple[int, int]:
    """MySQL's net_field_length: one byte below 251, else 0xfc/0xfd/0xfe and 2/3/8 bytes."""
    first = data[p]
    if first < 251:
        return first, p + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        raise DecodeError(f"bad packed integer prefix {first:#x}")
    return int.from_bytes(data[p + 1:p + 1 + width], "little"), p + 1 + width


def transaction_payload(body: bytes | memoryview) -> Iterator[bytes]:
    """The events inside a TRANSACTION_PAYLOAD body, each as header + body (no checksum), decompressed as
    they are read: a large compressed transaction never stands in memory whole uncompressed, only its
    compressed bytes (the server sends the event in one piece) and one window of the zstd stream."""
    fields: dict[int, int] = {}
    p = 0
    while True:
        kind, p = _packed_int(body, p)
        if kind == 0:
            break
        length, p = _packed_int(body, p)
        fields[kind], _ = _packed_int(body, p)
        p += length
    compression = fields.get(_COMPRESSION, _ZSTD)
    size = fields.get(_PAYLOAD_SIZE, len(body) - p)
    packed = memoryview(body)[p:p + size]
    if compression == _ZSTD:
        reader = zstandard.ZstdDecompressor().stream_reader(packed, read_across_frames=True)
        read = reader.read
    elif compression == _NONE:
        stream = io.BytesIO(packed)
        read = stream.read
    else:
        raise DecodeError(f"transaction payload compressed with algorithm {compression}, which binlake does not "
                          "know (MySQL writes zstd)")
    total = 0
    try:
        for event in _split(read):
            total += len(event)
            yield event
    except zstandard.ZstdError as exc:
        raise DecodeError(f"transaction payload does not decompress: {exc}") from None
    expected = fields.get(_UNCOMPRESSED_SIZE)
    if expected is not None and total != expected:
        raise DecodeError(f"transaction payload holds {total} bytes of events where its header says {expected}")


def _split(read) -> Iterator[bytes]:
    """Events back to back from `read(n)` (b"" at the end), one at a time."""
    buf, q = b"", 0
    while True:
        if len(buf) - q < HEADER_SIZE:
            buf, q = buf[q:] + read(_CHUNK), 0
            if len(buf) == 0:
                return
            if len(buf) < HEADER_SIZE:
                raise DecodeError(f"transaction payload ends inside an event header ({len(buf)} bytes)")
        size = HEADER.unpack_from(buf, q)[3]
        if size < HEADER_SIZE:
            raise DecodeError(f"transaction payload holds an event of {size} bytes, below a header's")
        while len(buf) - q < size:
            more = read(max(_CHUNK, size - (len(buf) - q)))
            if not more:
                raise DecodeError(f"transaction payload holds a truncated event ({size} bytes, "
                                  f"{len(buf) - q} left)")
            buf, q = buf[q:] + more, 0
        yield buf[q:q + size]
        q += size


def _inflate(data: bytes, p: int) -> bytes:
    """MariaDB's compressed block at data[p:]: header byte, big-endian length, zlib stream."""
    width = data[p] & 0x07
    expected = int.from_bytes(data[p + 1:p + 1 + width], "big")
    inflater = zlib.decompressobj()
    out = inflater.decompress(data[p + 1 + width:])
    if len(out) != expected or not inflater.eof:
        raise DecodeError(f"compressed event holds {len(out)} bytes where its header says {expected}")
    return out


def mariadb_query(body: bytes) -> bytes:
    """A QUERY_COMPRESSED body as a plain QUERY body (the statement text inflated)."""
    # post-header: thread id 4, exec time 4, db length 1, error code 2, status-vars length 2
    db_length, status_length = body[8], struct.unpack_from("<H", body, 11)[0]
    text_at = 13 + status_length + db_length + 1
    return body[:text_at] + _inflate(body, text_at)


def mariadb_rows(event_type: int, body: bytes) -> tuple[int, bytes]:
    """A ROWS_COMPRESSED body as (plain ROWS type, plain ROWS body): row images inflated."""
    plain = ROWS_COMPRESSED[event_type]
    p = 8                                         # table id 6, flags 2
    if plain >= 30:                                # v2: extra data, its length counting itself
        p += struct.unpack_from("<H", body, p)[0]
    columns, p = _packed_int(body, p)
    p += (columns + 7) // 8 * (2 if plain in _UPDATE_TYPES else 1)
    return plain, body[:p] + _inflate(body, p)
