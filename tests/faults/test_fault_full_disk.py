"""A full disk on one broker (a small tmpfs under its data directory, testkit/faults/disk.py): writes
to the partition it leads answer KAFKA_STORAGE_ERROR, the partition it follows goes on with the other
two replicas, nothing on disk is corrupted, and once space is freed the broker takes writes again
and its follower catches up, with no restart."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from testkit.faults.checkers import check_replicas
from testkit.faults.disk import SmallDisk
from testkit.faults.logs import read_replica
from testkit.faults.nemesis import wait_whole
from testkit.faults.workloads import read_all


def produce(bootstrap: str, partition: int, values: list[bytes]) -> list[tuple[bytes, int | None]]:
    """acks=all, no retries: (value, error code or None) for each."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                         "linger.ms": 0, "message.timeout.ms": 10000})
    results = []
    for value in values:
        producer.produce("disk", value, partition=partition, on_delivery=lambda err, msg, v=value: results.append(
            (v, err.code() if err else None)))
        producer.flush(15)
    return results


def test_a_full_disk_refuses_writes_corrupts_nothing_and_recovers_once_freed(fault_cluster, tmp_path):
    disks = []

    def small_disk(broker):
        if broker.broker_id == 1:
            disks.append(SmallDisk(broker.data_dir, "32m").mount())

    try:
        cluster = fault_cluster(before_start=small_disk)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # partition 0 led by broker 1 (the small disk), partition 1 led by broker 0 with broker 1 following
        admin.create_topics([NewTopic("disk", 2, replica_assignment=[[1, 0, 2], [0, 1, 2]],
                                      config={"min.insync.replicas": "2", "segment.bytes": "1048576"})])["disk"].result(60)
        topics = {"disk": 2}
        wait_whole(cluster, topics)
        before = [f"before-{i}".encode() for i in range(50)]
        assert all(err is None for _, err in produce(cluster.bootstrap, 0, before))
        assert all(err is None for _, err in produce(cluster.bootstrap, 1, before))

        disk = disks[0]
        disk.fill()
        assert disk.free_bytes() < 4096
        payload = b"x" * 2000
        led = produce(cluster.bootstrap, 0, [b"full-0-%d" % i + payload for i in range(20)])
        assert {err for _, err in led} <= {KafkaError.KAFKA_STORAGE_ERROR, KafkaError.NOT_ENOUGH_REPLICAS}, led
        assert KafkaError.KAFKA_STORAGE_ERROR in {err for _, err in led}
        followed = produce(cluster.bootstrap, 1, [b"full-1-%d" % i + payload for i in range(20)])
        acked_while_full = [v for v, err in followed if err is None]
        assert acked_while_full, f"the partition broker 1 follows took no write: {followed}"
        assert cluster.brokers[1].alive(), "the broker with a full disk exited"

        disk.free()
        deadline = time.monotonic() + 30
        while [err for _, err in produce(cluster.bootstrap, 0, [b"after"])] != [None]:
            assert time.monotonic() < deadline, "broker 1 still refuses writes once space is freed"
            time.sleep(1)
        wait_whole(cluster, topics)  # its follower caught up: back in the ISR

        final = read_all(cluster.bootstrap, "disk", 2, read_committed=False)
        values = {p: [v for _, v in records] for p, records in final.items()}
        assert values[0][:50] == before and values[0][-1] == b"after"
        assert not [v for v in values[0] if v.startswith(b"full-0-")], "a refused write was kept"
        assert values[1][:50] == before and set(acked_while_full) <= set(values[1])
        for p in range(2):
            replicas = {b.broker_id: read_replica(b.data_dir, "disk", p) for b in cluster.brokers}
            assert check_replicas(replicas) == {}, p

        cluster.kill(1)  # what is on the small disk opens again without complaint
        cluster.brokers[1].start()
        wait_whole(cluster, topics)
        assert "corrupt" not in cluster.brokers[1].log().lower()
        assert [v for _, v in read_all(cluster.bootstrap, "disk", 2, read_committed=False)[0]] == values[0]
    finally:
        for disk in disks:  # (lazily: the fixture stops the brokers that use it afterwards)
            disk.unmount()
