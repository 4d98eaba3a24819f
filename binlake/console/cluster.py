"""What the console shows of the cluster, read with the admin APIs any Kafka client has: brokers and
the controller, topics with their partitions and sizes, consumer groups with their lag, and
transactions. Each function blocks (the console runs them in threads) and returns plain data that
goes out as JSON."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from logcore.protocol.codec import ApiKey
from logcore.tools.group_lag import assigned, records_behind, stable_ends
from logcore.tools.wire_admin import WireAdmin

TIMEOUT_S = 15
DESCRIBE_LOG_DIRS_VERSION = 1
LIST_TRANSACTIONS_VERSION = 1


class ConsoleError(RuntimeError):
    """What the console could not read, in words for the page."""


def result_of(future, doing: str):
    try:
        return future.result(TIMEOUT_S)
    except KafkaException as exc:
        raise ConsoleError(f"{doing}: {exc.args[0].str()}") from None


class Cluster:
    def __init__(self, bootstrap: str, client_settings: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.client_settings = {"bootstrap.servers": bootstrap, **client_settings}
        self.admin = AdminClient({**self.client_settings, "client.id": "binlake-console"})
        # Log sizes and transactions need APIs librdkafka's admin client lacks: a PLAINTEXT connection of
        # binlake's own, so only without security settings.
        self.wire_ok = client_settings.get("security.protocol", "PLAINTEXT") == "PLAINTEXT"

    def overview(self) -> dict:
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        return {"cluster_id": metadata.cluster_id, "controller": metadata.controller_id,
                "brokers": [{"id": b.id, "host": b.host, "port": b.port} for b in
                            sorted(metadata.brokers.values(), key=lambda b: b.id)],
                "topics": len([t for t in metadata.topics if not t.startswith("__")]),
                "partitions": sum(len(t.partitions) for t in metadata.topics.values())}

    def topics(self) -> list[dict]:
        metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        sizes = self._sizes() if self.wire_ok else {}
        ends = self.offsets([(name, p) for name, t in metadata.topics.items() for p in t.partitions],
                             OffsetSpec.latest())
        starts = self.offsets(list(ends), OffsetSpec.earliest())
        topics = []
        for name, topic in sorted(metadata.topics.items()):
            partitions = [{"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs),
                           "start": starts.get((name, p.id)), "end": ends.get((name, p.id)),
                           "size": sizes.get((name, p.id)),
                           "under_replicated": len(p.isrs) < len(p.replicas)}
                          for p in sorted(topic.partitions.values(), key=lambda p: p.id)]
            topics.append({"name": name, "internal": name.startswith("__"), "partitions": partitions,
                           "messages": sum((p["end"] or 0) - (p["start"] or 0) for p in partitions),
                           "size": sum(p["size"] or 0 for p in partitions) if sizes else None,
                           "error": str(topic.error) if topic.error else None})
        return topics

    def groups(self) -> list[dict]:
        listed = result_of(self.admin.list_consumer_groups(request_timeout=TIMEOUT_S), "listing groups")
        ids = sorted(g.group_id for g in listed.valid)
        if not ids:
            return []
        described = {g: result_of(f, f"describing group {g}") for g, f in
                     self.admin.describe_consumer_groups(ids, request_timeout=TIMEOUT_S).items()}
        groups = []
        for group_id in ids:
            d = described[group_id]
            committed = result_of(self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id)], request_timeout=TIMEOUT_S)[group_id],
                f"reading the offsets of group {group_id}")
            offsets = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions if tp.offset >= 0}
            ends = self.offsets(list(offsets), OffsetSpec.latest())
            try:
                lags = records_behind(self.client_settings, offsets, stable_ends(self.admin, sorted(offsets), TIMEOUT_S),
                                      TIMEOUT_S)
            except KafkaException as exc:
                raise ConsoleError(f"reading the lag of group {group_id}: {exc.args[0].str()}") from None
            owner = {tp: m.member_id for m in d.members for tp in assigned(m)}
            partitions = [{"topic": t, "partition": p, "committed": offset, "end": ends.get((t, p)),
                           "lag": lags.get((t, p)), "member": owner.get((t, p))}
                          for (t, p), offset in sorted(offsets.items())]
            groups.append({"group": group_id, "state": d.state.name, "protocol": d.partition_assignor or "",
                           "members": [{"id": m.member_id, "client_id": m.client_id, "host": m.host,
                                        "assigned": [f"{t}-{p}" for t, p in assigned(m)]}
                                       for m in d.members],
                           "partitions": partitions,
                           "lag": sum(p["lag"] or 0 for p in partitions)})
        return groups

    def transactions(self) -> list[dict]:
        if not self.wire_ok:
            raise ConsoleError("transactions are read over a PLAINTEXT listener; give the console one "
                               "(--bootstrap-server) to see them")
        wire = WireAdmin(self.bootstrap, client_id="binlake-console")
        try:
            brokers = {b.node_id: (b.host, b.port) for b in wire.metadata([]).brokers}
            found = []
            for broker_id, address in sorted(brokers.items()):
                listed = wire.call(ApiKey.LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION,
                                   {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}, address)
                found += [{"transactional_id": t.transactional_id, "coordinator": broker_id,
                           "producer_id": t.producer_id, "state": t.transaction_state}
                          for t in listed.transaction_states]
            return sorted(found, key=lambda t: t["transactional_id"])
        finally:
            wire.close()

    def reset_group(self, group: str, to: str) -> dict:
        """Move every committed offset of an empty group to its partition's earliest or latest offset
        (`to`), as `binlake groups reset-offsets` would."""
        described = result_of(self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group],
                              f"describing group {group}")
        if described.members:
            raise ConsoleError(f"group {group} has {len(described.members)} active member(s): stop them first, as "
                               f"kafka-consumer-groups asks")
        committed = result_of(self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                                     request_timeout=TIMEOUT_S)[group],
                              f"reading the offsets of group {group}")
        partitions = [(tp.topic, tp.partition) for tp in committed.topic_partitions if tp.offset >= 0]
        targets = self.offsets(partitions, OffsetSpec.earliest() if to == "earliest" else OffsetSpec.latest())
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in targets.items()])
        result_of(self.admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group],
                  f"resetting the offsets of group {group}")
        return {"group": group, "offsets": [{"topic": t, "partition": p, "offset": o}
                                            for (t, p), o in sorted(targets.items())]}

    def _sizes(self) -> dict[tuple[str, int], int]:
        """Each partition's size: its largest copy among the brokers (DescribeLogDirs)."""
        wire = WireAdmin(self.bootstrap, client_id="binlake-console")
        sizes: dict[tuple[str, int], int] = {}
        try:
            for broker in wire.metadata([]).brokers:
                answer = wire.call(ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, {"topics": None},
                                   (broker.host, broker.port))
                for result in answer.results:
                    for topic in result.topics:
                        for p in topic.partitions:
                            key = (topic.name, p.partition_index)
                            sizes[key] = max(sizes.get(key, 0), p.partition_size)
        finally:
            wire.close()
        return sizes

    def offsets(self, partitions: list[tuple[str, int]], spec) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                          request_timeout=TIMEOUT_S)
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(TIMEOUT_S).offset
            except KafkaException:  # (a partition without a leader right now: shown without offsets)
                continue
        return found
