"""Integers and strings of MySQL's serialization framework (MySQL 8.3+, `libs/mysql/serialization`),
the encoding of GTID_TAGGED_LOG_EVENT and of the tags in a tagged GTID set.

Variable-length unsigned integer, 1 to 9 bytes, little-endian: the number of trailing 1-bits of the
first byte is the number of bytes that follow, and the value starts after the 0-bit ending them
(1 byte holds 7 bits, 2 bytes 14, ... 8 bytes 56; 9 bytes are 0xff and the 64-bit value). Signed
integers are mapped to unsigned first: x >= 0 as x << 1, x < 0 as ((-(x + 1)) << 1) | 1. A string
is its length as a variable-length integer, then its bytes.
"""

from __future__ import annotations

from cdc.errors import DecodeError

_MAX = (1 << 64) - 1


def encode_unsigned(value: int) -> bytes:
    if not 0 <= value <= _MAX:
        raise ValueError(f"{value} does not fit a 64-bit unsigned integer")
    size = min(max(1, -(-value.bit_length() // 7)), 9)    # 7 value bits per byte up to 8 bytes
    if size == 9:
        return b"\xff" + value.to_bytes(8, "little")
    marker = (1 << (size - 1)) - 1                          # size - 1 trailing 1-bits, then a 0-bit
    return ((value << size) | marker).to_bytes(size, "little")


class Reader:
    """Reads values one after another from `data`; raises DecodeError naming `what` if it ends early."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def limit(self, end: int) -> None:
        """The values end at byte `end` (a message's declared size): reading past it is reading past the end."""
        self.data = self.data[:end]

    def unsigned(self) -> int:
        data, pos = self.data, self.pos
        if pos >= len(data):
            raise self._truncated()
        first = data[pos]
        size = 1
        while size < 9 and first & (1 << (size - 1)):
            size += 1
        if pos + size > len(data):
            raise self._truncated()
        self.pos = pos + size
        if size == 9:
            return int.from_bytes(data[pos + 1:pos + 9], "little")
        return int.from_bytes(data[pos:pos + size], "little") >> size

    def signed(self) -> int:
        value = self.unsigned()
        return -(value >> 1) - 1 if value & 1 else value >> 1

    def string(self) -> bytes:
        length = self.unsigned()
        if self.pos + length > len(self.data):
            raise self._truncated()
        self.pos += length
        return self.data[self.pos - length:self.pos]

    def _truncated(self) -> DecodeError:
        return DecodeError(f"{self.what} ends in the middle of a value (byte {self.pos} of {len(self.data)})")
