"""The response encoder writes what kio would write for `build`'s entity, byte for byte, for every
response version kio knows (served today or not; the encoder exists only to be faster than kio)."""

import io
import os
import random
import struct
import uuid

import pytest
from kio.serial import entity_writer

from kio.schema.index import api_key_map

from logcore.protocol import codec
from logcore.protocol.codec import ErrorCode, FileRegion


def has_response(api_key: int, version: int) -> bool:
    try:
        codec.response_class(api_key, version)
    except Exception:
        return False
    return True


VERSIONS = [(key, version) for key in sorted(api_key_map) for version in range(20) if has_response(key, version)]

_INTS = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(2**31), 2**31 - 1),
         "int64": (-(2**63), 2**63 - 1), "uint8": (0, 255), "uint16": (0, 65535), "uint32": (0, 2**32 - 1),
         "uint64": (0, 2**64 - 1)}


def primitive(kafka_type: str, rng: random.Random, regions: list):
    if kafka_type in _INTS:
        return rng.choice([0, -1 if _INTS[kafka_type][0] else 1, rng.randint(*_INTS[kafka_type])])
    return {
        "float64": lambda: rng.choice([0.0, 0.5, rng.random()]),
        "bool": lambda: rng.random() < 0.5,
        "string": lambda: rng.choice(["", "t", "tøpic-" * rng.randint(1, 30)]),
        "bytes": lambda: os.urandom(rng.choice([0, 3, 200])),
        "records": lambda: regions.pop() if regions and rng.random() < 0.5 else os.urandom(rng.choice([0, 61, 300])),
        "error_code": lambda: rng.choice([0, ErrorCode.none, ErrorCode.not_leader_or_follower, 3]),
        "uuid": lambda: rng.choice([uuid.UUID(int=0), uuid.uuid4()]),
        "timedelta_i32": lambda: rng.choice([0, 100, 2**31 - 1]),
        "timedelta_i64": lambda: rng.choice([0, 100, 2**40]),
        "datetime_i64": lambda: rng.choice([-1, 0, 1_700_000_000_123]),
    }[kafka_type]()


def sample(cls: type, rng: random.Random, regions: list, depth: int = 0) -> dict:
    """Neutral data for `cls` as a handler might return it: some keys left out, some None."""
    data = {}
    for plan in codec._plan(cls):
        # kio cannot write a missing non-nullable timestamp or record set (build leaves None there)
        always = plan.kafka_type in ("datetime_i64", "records") and not plan.optional
        roll = 1 if always else rng.random()
        if roll < 0.15:
            continue
        if roll < 0.25:
            data[plan.name] = None
        elif plan.nested is not None:
            if plan.is_array:
                items = rng.randint(0, 3 - depth)
                data[plan.name] = [sample(plan.nested, rng, regions, depth + 1) for _ in range(items)]
            else:
                data[plan.name] = sample(plan.nested, rng, regions, depth + 1)
        elif plan.is_array:
            data[plan.name] = [primitive(plan.kafka_type, rng, regions) for _ in range(rng.randint(0, 3))]
        else:
            data[plan.name] = primitive(plan.kafka_type, rng, regions)
    return data


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
