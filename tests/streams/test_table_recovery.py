"""Where table recovery stops under exactly-once: faust recovers a changelog partition until it has
seen the record before the end the consumer reports, and a transactional changelog ends in a commit
marker that no reader sees. The end must be one past the last record a read_committed reader gets,
else every recovery waits for faust's 10-s fallback (hole 10, streams/exactly_once.py)."""

from __future__ import annotations

import asyncio

import faust
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams.exactly_once import TAIL_WINDOW, install

TOPIC = "recovery-changelog"


def write(address: str, transactions: list[tuple[int, bool]]) -> None:
    """Transactions of `count` records to partition 0, each committed or aborted (then a marker)."""
    producer = Producer({"bootstrap.servers": address, "transactional.id": "recovery-writer"})
    producer.init_transactions(30)
    for count, commit in transactions:
        producer.begin_transaction()
        for i in range(count):
            producer.produce(TOPIC, key=b"k%d" % i, value=b"%d" % i, partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)


def recovery_ends(address: str) -> dict[int, int]:
    """Per partition, the end an exactly-once app's consumer gives faust's recovery."""
    app = faust.App("recovery-ends", broker=f"kafka://{address}", processing_guarantee="exactly_once")
    app.in_worker = True  # (as faust's Worker marks it: only a worker's consumer reads transactionally)
    assert install(app)

    async def ends():
        await app.consumer.start()
        try:
            return await asyncio.wait_for(app.consumer.highwaters(*(faust.types.TP(TOPIC, p) for p in range(3))), 60)
        finally:
            await app.consumer.stop()
    return {tp.partition: end for tp, end in app.loop.run_until_complete(ends()).items()}


def test_recovery_ends_past_the_last_committed_record_not_at_the_commit_marker(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    # partition 0: 5 committed records (offsets 0-4), their marker (5), then more aborted
    # transactions behind it than one read-back window holds, each with its abort marker
    aborted = TAIL_WINDOW // 3 + 2
    write(broker.address, [(5, True)] + [(2, False)] * aborted)
    ends = recovery_ends(broker.address)
    assert ends[0] == 5, f"recovery of partition 0 would wait for offset {ends[0] - 1}, which no reader gets"
    assert ends[1] == 0, "an empty partition needs no recovery"


def test_a_changelog_of_aborted_transactions_only_needs_no_recovery(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    write(broker.address, [(3, False), (4, False)])
    assert recovery_ends(broker.address)[0] == 0


def test_empty_changelogs_need_no_recovery(broker):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    assert recovery_ends(broker.address) == {0: 0, 1: 0, 2: 0}
