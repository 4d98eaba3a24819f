"""The response encoder writes what kio would write for `build`'s entity, byte for byte, for every
response version kio knows (served today or not; the encoder exists only to be faster than kio)."""

import io
import os
import random
import struct

import pytest
from kio.serial import entity_writer

from kio.schema.index import api_key_map

from logcore.protocol import codec
from logcore.protocol.codec import FileRegion
from samples import sample


def has_response(api_key: int, version: int) -> bool:
    try:
        codec.response_class(api_key, version)
    except Exception:
        return False
    return True


VERSIONS = [(key, version) for key in sorted(api_key_map) for version in range(20) if has_response(key, version)]

def without_regions(value):
    if isinstance(value, FileRegion):
        return value.read()
    if isinstance(value, dict):
        return {k: without_regions(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_regions(v) for v in value]
    return value


def kio_frame(api_key: int, version: int, correlation_id: int, data: dict) -> bytes:
    cls = codec.response_class(api_key, version)
    buf = io.BytesIO()
    buf.write(struct.pack(">i", correlation_id))
    if codec.response_header_flexible(api_key, cls):
        buf.write(b"\0")
    entity_writer(cls)(buf, codec.build(cls, data))
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_encoder_matches_kio(api_key, version, tmp_path):
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(4096))
    fd = os.open(path, os.O_RDONLY)
    try:
        for seed in range(25):
            rng = random.Random(seed * 1000 + api_key * 31 + version)
            regions = [FileRegion(fd, rng.randint(0, 2000), rng.randint(0, 2000)) for _ in range(4)]
            data = sample(codec.response_class(api_key, version), rng, regions)
            chunks = codec.encode_response(api_key, version, seed, data)
            wire = b"".join(c.read() if isinstance(c, FileRegion) else c for c in chunks)
            assert wire == kio_frame(api_key, version, seed, without_regions(data)), f"seed {seed}: {data}"
    finally:
        os.close(fd)
