"""Mutations of recorded request frames, reproducible from a seed.

Each frame is one corpus frame with one to three of: bit flips, a run overwritten with random
bytes, an "interesting" value dropped in (lengths that claim billions of elements, -1, 0, the
int32 and int16 extremes, a 5-byte varint), truncation, random bytes appended, bytes inserted or
deleted, a splice of two frames, a random api key or version. The size prefix is then usually
right, so the body reaches the parser; one frame in ten gets a wrong one instead (off by a few,
random, negative, huge), which tests the framing.
"""

from __future__ import annotations

import random
import struct
from typing import Callable

INTERESTING = [
    b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00\x00\x00", b"\xff\xff",
    b"\x7f\xff", b"\x80\x00", b"\x00\x00", b"\xff", b"\x00", b"\x01", b"\x7f",
    b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x08", b"\xfe\xff\xff\xff\x0f",
]


class Mutator:
    def __init__(self, corpus: list[bytes], seed: int) -> None:
        self.bodies = [frame[4:] for frame in corpus]
        self.rng = random.Random(seed)
        self.strategies: list[tuple[str, Callable[[bytearray], bytearray]]] = [
            ("bit flips", self._flip_bits), ("random run", self._random_run), ("interesting value", self._interesting),
            ("truncation", self._truncate), ("appended bytes", self._append), ("inserted bytes", self._insert),
            ("deleted bytes", self._delete), ("splice", self._splice), ("api key or version", self._api),
        ]

    def frame(self) -> tuple[list[str], bytes]:
        """(the mutations applied, the frame to send with its size prefix)."""
        rng = self.rng
        body = bytearray(rng.choice(self.bodies))
        applied = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            name, mutate = rng.choice(self.strategies)
            body = mutate(body)
            applied.append(name)
        size = len(body)
        if rng.random() < 0.1:
            applied.append("wrong size prefix")
            size = rng.choice([size + rng.randint(1, 8), max(size - rng.randint(1, 8), 0), rng.randint(-2**31, -1),
                               rng.randint(0, 2**31 - 1), 2**31 - 1])
        return applied, struct.pack(">i", size) + bytes(body)

    # -- mutations ---------------------------------------------------------------------------

    def _position(self, body: bytearray) -> int:
        return self.rng.randrange(len(body)) if body else 0

    def _flip_bits(self, body: bytearray) -> bytearray:
        for _ in range(self.rng.randint(1, 8)):
            if body:
                body[self._position(body)] ^= 1 << self.rng.randrange(8)
        return body

    def _random_run(self, body: bytearray) -> bytearray:
        at = self._position(body)
        run = self.rng.randbytes(self.rng.randint(1, 16))
        body[at:at + len(run)] = run
        return body

    def _interesting(self, body: bytearray) -> bytearray:
        at = self._position(body)
        value = self.rng.choice(INTERESTING)
        body[at:at + len(value)] = value
        return body

    def _truncate(self, body: bytearray) -> bytearray:
        return body[:self._position(body)]

    def _append(self, body: bytearray) -> bytearray:
        return body + self.rng.randbytes(self.rng.randint(1, 64))

    def _insert(self, body: bytearray) -> bytearray:
        at = self._position(body)
        return body[:at] + self.rng.randbytes(self.rng.randint(1, 8)) + body[at:]

    def _delete(self, body: bytearray) -> bytearray:
        at = self._position(body)
        return body[:at] + body[at + self.rng.randint(1, 8):]

    def _splice(self, body: bytearray) -> bytearray:
        other = self.rng.choice(self.bodies)
        return body[:self._position(body)] + other[self.rng.randrange(len(other)):]

    def _api(self, body: bytearray) -> bytearray:
        if len(body) < 4:
            return body
        if self.rng.random() < 0.5:
            struct.pack_into(">h", body, 0, self.rng.choice([self.rng.randint(0, 80), self.rng.randint(-2**15, 2**15 - 1)]))
        else:
            struct.pack_into(">h", body, 2, self.rng.choice([self.rng.randint(0, 20), self.rng.randint(-2**15, 2**15 - 1)]))
        return body
