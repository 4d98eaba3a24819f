"""Kafka's default partitioner: `Utils.toPositive(Utils.murmur2(key)) % numPartitions`.

Java clients, librdkafka's `murmur2_random` and this function put the same key in the same partition.
"""

from __future__ import annotations

import struct

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
