"""The Debezium schema topic's reader (spark_sink/schemas.py) against a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from spark_sink.schemas import DebeziumSchemas


def test_a_catch_up_whose_brokers_are_gone_fails_saying_so_instead_of_waiting_for_ever(broker):
    producer = Producer({"bootstrap.servers": broker.address})
    producer.produce("shop", b'{"source": {}, "ddl": ""}')
    producer.flush(30)
    schemas = DebeziumSchemas(broker.address, "shop")
    schemas.stall_timeout_s = 3.0
    broker.kill()
    with pytest.raises(RuntimeError, match=r"schema topic shop from .*nothing came for 3 s"):
        schemas.catch_up()
