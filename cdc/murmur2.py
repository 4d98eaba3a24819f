"""Kafka's default partitioner: `Utils.toPositive(Utils.murmur2(key)) % numPartitions`.

Java clients, librdkafka's `murmur2_random` and this function put the same key in the same partition.
`partitions_for` places many keys at once, the connector's way (a rows event's keys together): in pure
Python a key's murmur2 is a loop of a few integer operations per 4-byte word, about 1.2 µs for a
13-byte key and a fifth of the source's work on inserts; computed for all keys of one length together
in the 64-bit lanes of one big integer, it is about a quarter of that.
"""

from __future__ import annotations

import struct
import sys
from array import array
from functools import lru_cache

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_WORDS = [struct.Struct(f"<{n}I").unpack_from for n in range(64)]


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32-bit, Kafka's seed), returned as Java's signed int."""
    length = len(data)
    h = _SEED ^ length
    n = length >> 2
    words = _WORDS[n](data) if n < 64 else struct.unpack_from(f"<{n}I", data)
    for k in words:
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) ^ (k * _M)) & _MASK
    extra = length & 3
    if extra:
        body = length - extra
        if extra == 3:
            h ^= data[body + 2] << 16
        if extra >= 2:
            h ^= data[body + 1] << 8
        h = ((h ^ data[body]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_LANES_FROM = 16      # keys of one length below this many are hashed one by one
_ONE_PER_LANE = (1).to_bytes(8, "little")


def partitions_for(keys: list[bytes], partitions: int) -> list[int]:
    """[partition_for(key, partitions) for key in keys], keys of one length hashed together."""
    if partitions == 1:
        return [0] * len(keys)
    lengths = set(map(len, keys))
    if len(keys) < _LANES_FROM or min(lengths) < 4 and len(lengths) == 1:
        return [(murmur2(k) & 0x7FFFFFFF) % partitions for k in keys]
    if len(lengths) == 1:
        return [(h & 0x7FFFFFFF) % partitions for h in _murmur2_lanes(keys, lengths.pop())]
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(len(key), []).append(i)
    out = [0] * len(keys)
    for length, indexes in groups.items():
        group = [keys[i] for i in indexes]
        hashes = _murmur2_lanes(group, length) if len(group) >= _LANES_FROM and length >= 4 else map(murmur2, group)
        for i, h in zip(indexes, hashes):
            out[i] = (h & 0x7FFFFFFF) % partitions
    return out


@lru_cache(maxsize=256)
def _words_of(length: int, n: int) -> struct.Struct:
    """n keys of `length` bytes, back to back, as each one's little-endian 32-bit words, then its 0-3
    trailing bytes."""
    return struct.Struct("<" + f"{length >> 2}I{length & 3}B" * n)


def _murmur2_lanes(keys: list[bytes], length: int) -> array:
    """murmur2 (unsigned) of keys of one `length` (4 or more bytes), all at once.

    Key i's hash state lives in bits 64i..64i+63 of one integer, always reduced to its low 32 bits
    between steps. A 32-bit lane times the 32-bit constant stays inside its 64 bits, so each of
    murmur2's multiplications, xors and masks is one big-integer operation for every key; a right
    shift moves a lane's low bits into the high half of the lane below it, which the next mask clears.
    """
    n = len(keys)
    words, extra = length >> 2, length & 3
    ones = int.from_bytes(_ONE_PER_LANE * n, "little")
    mask = ones * _MASK
    flat = _words_of(length, n).unpack(b"".join(keys))
    stride = words + extra

    def lanes(j: int) -> int:           # word (or trailing byte) j of every key, one a lane
        return int.from_bytes(array("Q", flat[j::stride]).tobytes(), sys.byteorder)

    h = ones * (_SEED ^ length)
    for j in range(words):
        k = (lanes(j) * _M) & mask
        k = (((k ^ (k >> 24)) & mask) * _M) & mask
        h = ((h * _M) & mask) ^ k
    if extra:
        tail = 0
        for b in range(extra):
            tail |= lanes(words + b) << (8 * b)
        h = ((h ^ tail) * _M) & mask
    h = (h ^ (h >> 13)) & mask
    h = (h * _M) & mask
    h = (h ^ (h >> 15)) & mask
    out = array("Q")
    out.frombytes(h.to_bytes(8 * n, sys.byteorder))
    return out
