"""Transforms are pure functions over records: filter, rename_topic, drop_fields, and their chain."""

import copy

from pydantic import TypeAdapter

from connect.api import SourceRecord
from connect.transforms import TransformConfig, chain

CONFIGS = TypeAdapter(list[TransformConfig])


def build(*configs: dict):
    return chain(CONFIGS.validate_python(list(configs)))


def change(op: str, status, topic: str = "shop.orders") -> SourceRecord:
    return SourceRecord(topic=topic, key={"id": 1},
                        value={"op": op, "after": {"id": 1, "status": status, "password": "pw", "tags": ["a", "b"]}})


def test_filter_keeps_only_matching_records():
    keep_creates = build({"type": "filter", "field": "value.op", "op": "in", "value": ["c", "r"]})
    assert keep_creates(change("c", "new")) is not None
    assert keep_creates(change("u", "new")) is None

    big = build({"type": "filter", "field": "value.after.status", "op": "ge", "value": 10})
    assert big(change("c", 10)) is not None and big(change("c", 9)) is None
    assert big(change("c", "ten")) is None  # not comparable: does not hold, does not crash the task


def test_filter_on_missing_fields_topics_and_regexes():
    assert build({"type": "filter", "field": "value.before", "op": "missing"})(change("c", 1)) is not None
    assert build({"type": "filter", "field": "value.before.id", "op": "ne", "value": 1})(change("c", 1)) is not None
    assert build({"type": "filter", "field": "value.before.id", "op": "eq", "value": 1})(change("c", 1)) is None
    assert build({"type": "filter", "field": "value.after.tags.1", "op": "eq", "value": "b"})(change("c", 1))
    matches = build({"type": "filter", "field": "topic", "op": "matches", "value": r"shop\.(orders|items)"})
    assert matches(change("c", 1)) is not None
    assert matches(change("c", 1, topic="shop.orders_archive")) is None  # anchored: the whole topic must match
    tombstone = SourceRecord(topic="t", key={"id": 1}, value=None)
    assert build({"type": "filter", "field": "value.op", "op": "exists"})(tombstone) is None


def test_rename_topic_rewrites_full_matches_only():
    route = build({"type": "rename_topic", "regex": r"shop\.(?P<table>.*)", "replacement": r"cdc.\g<table>.v1"})
    assert route(change("c", 1)).topic == "cdc.orders.v1"
    assert route(change("c", 1, topic="other.shop.orders")).topic == "other.shop.orders"


def test_drop_fields_returns_a_new_record_and_leaves_the_input_alone():
    record = change("c", 1)
    before = copy.deepcopy(record.value)
    out = build({"type": "drop_fields", "fields": ["value.after.password", "value.before.password", "key.id"]})(record)
    assert out.value == {"op": "c", "after": {"id": 1, "status": 1, "tags": ["a", "b"]}}
    assert out.key == {}
    assert record.value == before and record.key == {"id": 1}


def test_chain_runs_in_order_and_stops_at_a_drop():
    pipeline = build(
        {"type": "rename_topic", "regex": r"shop\.(.*)", "replacement": r"\1"},
        {"type": "filter", "field": "topic", "op": "eq", "value": "orders"},
        {"type": "drop_fields", "fields": ["value.after.password"]},
    )
    out = pipeline(change("u", 2))
    assert (out.topic, out.value["after"].get("password")) == ("orders", None)
    assert pipeline(change("u", 2, topic="shop.items")) is None
