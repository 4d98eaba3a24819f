"""Random neutral data for any kio entity class, shared by the encoder and bounds tests."""

import os
import random
import uuid

from logcore.protocol import schema
from logcore.protocol.codec import ErrorCode


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


def sample(cls: type, rng: random.Random, regions: list, depth: int = 0, strict: bool = False) -> dict:
    """Neutral data for `cls` as a handler might return it: some keys left out, some None. `strict`:
    None only where the schema allows null, as a well-behaved client sends."""
    data = {}
    for plan in schema.field_plan(cls):
        # kio cannot write a missing non-nullable timestamp or record set (build leaves None there)
        always = plan.kafka_type in ("datetime_i64", "records") and not plan.optional
        roll = 1 if always else rng.random()
        if roll < 0.15:
            continue
        if roll < 0.25 and (plan.optional or not strict):
            data[plan.name] = None
        elif plan.nested is not None:
            if plan.is_array:
                items = rng.randint(0, 3 - depth)
                data[plan.name] = [sample(plan.nested, rng, regions, depth + 1, strict) for _ in range(items)]
            else:
                data[plan.name] = sample(plan.nested, rng, regions, depth + 1, strict)
        elif plan.is_array:
            data[plan.name] = [primitive(plan.kafka_type, rng, regions) for _ in range(rng.randint(0, 3))]
        else:
            data[plan.name] = primitive(plan.kafka_type, rng, regions)
    return data
