"""Where table recovery stops under exactly-once: faust recovers a changelog partition until it has
seen the record before the end the consumer reports, and a transactional changelog ends in a commit
marker that no reader sees. The end must be one past the last record a read_committed reader gets,
else every recovery waits for faust's 10-s fallback (hole 10, streams/exactly_once.py). And that
fallback must not mark done a recovery that a rebalance restarted after its fetch (hole 11)."""

from __future__ import annotations

import asyncio

import aiokafka
import faust
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams.exactly_once import TAIL_WINDOW, install

TOPIC = "recovery-changelog"


def write(address: str, transactions: list[tuple[int, bool]], topic: str = TOPIC) -> None:
    """Transactions of `count` records to partition 0, each committed or aborted (then a marker)."""
    producer = Producer({"bootstrap.servers": address, "transactional.id": "recovery-writer"})
    producer.init_transactions(30)
    for count, commit in transactions:
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=b"%d" % i, value=b"%d" % i, partition=0)
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


def test_a_recovery_restarted_after_its_fetch_is_not_marked_done(broker):
    """A rebalance that cuts a table recovery short after the consumer fetched a changelog partition
    drops the fetched records before the table gets them; the recovery it restarts must read them
    again. faust's recovery, after 10 s without changelog records, takes a partition whose consumer
    position is at or past its end for one ending in aborted transactions and marks it recovered: with
    the position the cut-short fetch left, the table lost those records (the exactly-once test saw
    a table's counts start again at 1)."""
    app = faust.App("recovery-restart", broker=f"kafka://{broker.address}", processing_guarantee="exactly_once",
                    store="memory://")
    table = app.Table("counts", default=int, partitions=1)
    app.in_worker = True
    assert install(app)
    changelog = table.changelog_topic.get_topic_name()
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(changelog, 1, 1)])[changelog].result(30)
    write(broker.address, [(5, True), (2, False)], topic=changelog)  # records 0-4, marker 5, aborted 6-7, marker 8
    tp, recovery = faust.types.TP(changelog, 0), app.tables.recovery

    async def restarted_recovery():
        await app.consumer.start()
        try:
            # the fetch of the recovery the rebalance cut short: the consumer is past the records, which
            # never reached the table
            thread = app.consumer._thread
            consumer = thread._ensure_consumer()
            await thread.call_thread(consumer.assign, [aiokafka.TopicPartition(changelog, 0)])
            await thread.call_thread(consumer.seek, aiokafka.TopicPartition(changelog, 0), 0)
            while await thread.call_thread(consumer.position, aiokafka.TopicPartition(changelog, 0)) < 9:
                await thread.call_thread(consumer.getmany, timeout_ms=1000)
            # the restarted recovery, as faust's rebalance and its first steps leave it: the end it reads
            # to, and nothing read yet (then it seeks and reads; a partition marked done is skipped)
            recovery.add_active(table, tp)
            await recovery._build_highwaters(app.consumer, {tp}, recovery.active_highwaters, "active")
            recovery.active_offsets[tp] = -1
            assert recovery.active_highwaters[tp] == 4
            await recovery.start()  # (its changelog reader, idle: faust's fallback runs after two 5-s timeouts)
            try:
                await asyncio.sleep(11.5)
                return recovery.active_offsets[tp]
            finally:
                await recovery.stop()
        finally:
            await app.consumer.stop()
    read = app.loop.run_until_complete(restarted_recovery())
    assert read == -1, f"the restarted recovery was marked done up to offset {read} before it read the changelog"
