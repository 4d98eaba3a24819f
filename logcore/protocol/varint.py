"""Kafka's variable-length integers, written: 7 bits a byte, low bits first, the high bit set on
every byte but the last. Unsigned for the flexible versions' compact lengths and tagged fields;
zigzag (0, -1, 1, -2, ... → 0, 1, 2, 3, ...) for the signed varints and varlongs of records. The one
writer of both, for the codec and the record batches."""

from __future__ import annotations

_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def uvarint(n: int) -> bytes:
    """An unsigned varint; `n` >= 0."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n: int) -> bytes:
    """A signed varint or varlong (zigzag-encoded, then as `uvarint`)."""
    return uvarint((n << 1) ^ (n >> 63))
