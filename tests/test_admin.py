"""Admin APIs (topics, partitions, configs, records, cluster, log dirs) through real admin clients."""

import os
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from aiokafka.admin import NewTopic as AioNewTopic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, OffsetSpec)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.errors import UnknownTopicOrPartitionError
from kafka.protocol.admin import CreateTopicsRequest, DescribeConfigsRequest
from kafka.structs import TopicPartition as KpTopicPartition

TIMEOUT = 15
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.address})


@pytest.fixture
def kp_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.address)
    yield client
    client.close()


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def create(admin, *topics: NewTopic, validate_only=False) -> dict:
    return admin.create_topics(list(topics), operation_timeout=TIMEOUT, validate_only=validate_only)


def topic_configs(admin, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def produce(address: str, topic: str, values: list[bytes], partition: int = 0) -> list:
    """Produce and flush; returns each delivery's error (None when stored)."""
    errors = []
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0, "message.max.bytes": 10_000_000})
    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(TIMEOUT) == 0
    return errors


# -- create / describe / delete with each client ----------------------------------------------


def test_kafka_python_creates_describes_and_deletes_by_id(kp_admin):
    result = kp_admin.create_topics({"kp": {"num_partitions": 3, "configs": {"retention.ms": "60000"}}},
                                    raise_errors=False)["topics"][0]
    # CreateTopics v5+ answers with the topic as created: counts, id and every config with its source.
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 3, 1)
    assert result["configs"]["retention.ms"]["value"] == "60000"
    assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert result["configs"]["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    topic_id = uuid.UUID(result["topic_id"])

    [described] = kp_admin.describe_topics(["kp"])
    assert uuid.UUID(str(described["topic_id"])) == topic_id
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
            for p in described["partitions"]] == [(i, 0, [0], [0]) for i in range(3)]
    assert "kp" in kp_admin.list_topics()

    deleted = kp_admin.delete_topics([topic_id], raise_errors=False)["topics"]  # DeleteTopics v6, by id
    assert [(t["name"], t["error_code"]) for t in deleted] == [("kp", 0)]
    assert "kp" not in kp_admin.list_topics()
    unknown = kp_admin.delete_topics([uuid.uuid4(), "never-was"], raise_errors=False)["topics"]
    assert sorted(t["error_code"] for t in unknown) == [3, 100]  # UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID


def test_confluent_creates_describes_and_deletes(admin):
    futures = create(admin, NewTopic("ck", num_partitions=2, replication_factor=1, config={"cleanup.policy": "compact"}),
                     NewTopic("ck-default"))
    for future in futures.values():
        assert future.result(TIMEOUT) is None
    described = admin.describe_topics(TopicCollection(["ck", "ck-default"]))
    ck, default = described["ck"].result(TIMEOUT), described["ck-default"].result(TIMEOUT)
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr]) for p in ck.partitions] == [
        (0, 0, [0], [0]), (1, 0, [0], [0])]
    assert len(default.partitions) == 1  # -1 took the broker's num.partitions
    assert topic_configs(admin, "ck")["cleanup.policy"].value == "compact"

    assert admin.delete_topics(["ck"], operation_timeout=TIMEOUT)["ck"].result(TIMEOUT) is None
    assert set(admin.list_topics(timeout=TIMEOUT).topics) == {"ck-default"}
    assert error_of(admin.delete_topics(["ck"])["ck"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


async def test_aiokafka_creates_describes_and_deletes(broker):
    client = AIOKafkaAdminClient(bootstrap_servers=broker.address)
    await client.start()
    try:
        response = await client.create_topics([AioNewTopic("aio", 4, 1, topic_configs={"segment.bytes": "100000"}),
                                               AioNewTopic("aio", 1, 1)])
        assert [(name, code) for name, code, *_ in response.topic_errors] == [("aio", 42)]  # named twice
        response = await client.create_topics([AioNewTopic("aio", 4, 1, topic_configs={"segment.bytes": "100000"})])
        assert [(name, code) for name, code, *_ in response.topic_errors] == [("aio", 0)]
        [described] = await client.describe_topics(["aio"])
        assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2, 3]
        [configs] = await client.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, "aio")])
        values = {name: value for name, value, *_ in configs.resources[0][4]}
        assert values["segment.bytes"] == "100000"
        response = await client.delete_topics(["aio"])
        assert [(name, code) for name, code, *_ in response.topic_error_codes] == [("aio", 0)]
        assert "aio" not in await client.list_topics()
    finally:
        await client.close()


# -- CreateTopics refusals ---------------------------------------------------------------------

BAD_TOPICS = [
    ("x" * 250, {}, 17, "maximum is 249"),
    ("has space", {}, 17, "illegal"),
    ("ümlaut", {}, 17, "illegal"),
    (".", {}, 17, "cannot be '.'"),
    ("..", {}, 17, "cannot be '..'"),
    ("taken", {}, 36, "already exists"),
    ("dotted.name", {}, 17, "collides with existing topic 'dotted_name'"),
    ("zero", {"num_partitions": 0}, 37, "at least 1"),
    ("rf0", {"replication_factor": 0}, 38, "at least 1"),
    ("rf4", {"replication_factor": 4}, 38, "replication factor 4 larger than available brokers 1"),
    ("cfg", {"configs": {"retention.msec": "1"}}, 40, "unknown topic config 'retention.msec'"),
    ("cfgval", {"configs": {"retention.ms": "soon"}}, 40, "invalid value 'soon' for configuration retention.ms"),
    ("cfgnull", {"configs": {"retention.ms": None}}, 40, "null values are not allowed"),
    ("cfgrange", {"configs": {"cleanup.policy": "shred"}}, 40, "must be one of delete, compact"),
    ("other-broker", {"assignments": {0: [1]}}, 39, "unknown broker(s) [1]"),
    ("twice", {"assignments": {0: [0, 0]}}, 39, "more than once"),
    ("gap", {"assignments": {0: [0], 2: [0]}}, 39, "consecutive"),
    ("both", {"num_partitions": 2, "assignments": {0: [0]}}, 42, "not both"),
]


def test_create_topic_refusals_carry_code_and_message(kp_admin):
    kp_admin.create_topics({"taken": {}, "dotted_name": {}})
    results = kp_admin.create_topics({name: spec for name, spec, _, _ in BAD_TOPICS}, raise_errors=False)["topics"]
    got = {r["name"]: (r["error_code"], r["error_message"]) for r in results}
    for name, _spec, code, message in BAD_TOPICS:
        assert got[name][0] == code, (name, got[name])
        assert message in got[name][1], (name, got[name])
    assert sorted(kp_admin.list_topics()) == ["dotted_name", "taken"]


def test_partition_assigned_twice_is_refused(kp_admin):
    topic = CreateTopicsRequest.CreatableTopic
    assignment = topic.CreatableReplicaAssignment
    request = CreateTopicsRequest(topics=[topic(name="twice-0", num_partitions=-1, replication_factor=-1, configs=[],
                                                assignments=[assignment(partition_index=0, broker_ids=[0])] * 2)],
                                  timeout_ms=TIMEOUT * 1000)
    # kafka-python's admin API takes a dict, so a repeated partition needs its request class.
    [result] = kp_admin._manager.run(kp_admin._manager.send, request).topics
    assert (result.error_code, result.error_message) == (39, "partition 0 is assigned more than once")


def test_create_topic_refusals_through_librdkafka(admin):
    futures = create(admin, NewTopic("rf4", 1, 4), NewTopic("cfg", 1, 1, config={"nope": "1"}),
                     NewTopic("ok", 2, replica_assignment=[[0], [0]]))
    error = error_of(futures["rf4"])
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error.str() == "replication factor 4 larger than available brokers 1"
    assert error_of(futures["cfg"]).code() == KafkaError.INVALID_CONFIG
    assert futures["ok"].result(TIMEOUT) is None
    assert len(admin.list_topics(timeout=TIMEOUT).topics["ok"].partitions) == 2


def test_validate_only_checks_without_creating(kp_admin):
    result = kp_admin.create_topics({"dry": {"num_partitions": 5, "configs": {"retention.ms": "1000"}},
                                     "dry-bad": {"replication_factor": 3}},
                                    validate_only=True, raise_errors=False)["topics"]
    by_name = {r["name"]: r for r in result}
    assert (by_name["dry"]["error_code"], by_name["dry"]["num_partitions"]) == (0, 5)
    assert by_name["dry"]["configs"]["retention.ms"]["value"] == "1000"
    assert by_name["dry-bad"]["error_code"] == 38
    assert kp_admin.list_topics() == []


def test_topic_deletion_can_be_disabled(broker_factory):
    broker = broker_factory(config={"delete.topic.enable": "false"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    create(admin, NewTopic("kept", 1, 1))["kept"].result(TIMEOUT)
    error = error_of(admin.delete_topics(["kept"])["kept"])
    assert error.code() in (KafkaError.TOPIC_DELETION_DISABLED, KafkaError.INVALID_REQUEST)  # by version
    assert "kept" in admin.list_topics(timeout=TIMEOUT).topics


# -- CreatePartitions --------------------------------------------------------------------------


async def test_create_partitions_grows_topic(admin, broker):
    create(admin, NewTopic("grow", 1, 1))["grow"].result(TIMEOUT)
    assert error_of(admin.create_partitions([NewPartitions("grow", 1)])["grow"]).code() == KafkaError.INVALID_PARTITIONS
    assert admin.create_partitions([NewPartitions("grow", 9)], validate_only=True)["grow"].result(TIMEOUT) is None
    error = error_of(admin.create_partitions([NewPartitions("grow", 2, replica_assignment=[[1]])])["grow"])
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "unknown broker(s) [1]" in error.str()
    error = error_of(admin.create_partitions([NewPartitions("grow", 3, replica_assignment=[[0]])])["grow"])
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "needs 2 replica assignment(s)" in error.str()
    assert len(admin.list_topics(timeout=TIMEOUT).topics["grow"].partitions) == 1  # nothing above changed it

    assert admin.create_partitions([NewPartitions("grow", 3, replica_assignment=[[0], [0]])])["grow"].result(
        TIMEOUT) is None
    error = error_of(admin.create_partitions([NewPartitions("grow", 2)])["grow"])
    assert error.code() == KafkaError.INVALID_PARTITIONS and "has 3 partitions, more than the requested 2" in error.str()
    async with AIOKafkaProducer(bootstrap_servers=broker.address) as producer:
        sent = await producer.send_and_wait("grow", b"in the new partition", partition=2)
    assert (sent.partition, sent.offset) == (2, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.address, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([AioTopicPartition("grow", 2)])
        assert (await consumer.getone()).value == b"in the new partition"
    finally:
        await consumer.stop()


# -- configs -----------------------------------------------------------------------------------


def test_configs_round_trip_take_effect_and_survive_restart(admin, broker):
    create(admin, NewTopic("cfg", 1, 1, config={"retention.ms": "3600000"}))["cfg"].result(TIMEOUT)
    configs = topic_configs(admin, "cfg")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("3600000", TOPIC_CONFIG)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == ("delete", DEFAULT_CONFIG)

    # AlterConfigs replaces the whole override set: retention.ms falls back to the default.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg", set_config={"max.message.bytes": "2000"})
    assert admin.alter_configs([resource])[resource].result(TIMEOUT) is None
    configs = topic_configs(admin, "cfg")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("604800000", DEFAULT_CONFIG)
    assert configs["max.message.bytes"].value == "2000"
    # ... and the partition log applies it at once.
    assert [e.code() if e else None for e in produce(broker.address, "cfg", [b"x" * 5000])] == [
        KafkaError.MSG_SIZE_TOO_LARGE]

    incremental(admin, "cfg", ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ("segment.ms", "100000", AlterConfigOpType.SET)).result(TIMEOUT)
    assert topic_configs(admin, "cfg")["cleanup.policy"].value == "delete,compact"
    incremental(admin, "cfg", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                ("max.message.bytes", None, AlterConfigOpType.DELETE)).result(TIMEOUT)  # (answered before the restart)
    broker.restart()
    configs = topic_configs(admin, "cfg")
    assert {k: (e.value, e.source) for k, e in configs.items() if e.source != DEFAULT_CONFIG} == {
        "cleanup.policy": ("compact", TOPIC_CONFIG), "segment.ms": ("100000", TOPIC_CONFIG)}
    assert produce(broker.address, "cfg", [b"x" * 5000]) == [None]  # max.message.bytes is the default again


def incremental(admin, topic: str, *ops, validate_only=False):
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    return admin.incremental_alter_configs([resource], validate_only=validate_only)[resource]


def test_an_unknown_broker_setting_is_named_in_the_log(broker_factory):
    broker = broker_factory(config={"log.cleaner.threadz": "2", "num.partitions": "2"})
    assert "broker setting 'log.cleaner.threadz' is not one binlake knows: it has no effect" in broker.log()
    assert "'num.partitions'" not in broker.log()


def test_broker_config_refuses_an_unknown_key():
    """In code (an in-process broker, a tool) a misspelt setting is an error naming it, not a default;
    the command's warning above is Kafka's behaviour for its file and --override."""
    from logcore.config import BrokerConfig
    from logcore.protocol.errors import InvalidConfig
    with pytest.raises(InvalidConfig, match="'log.cleaner.threadz' is not one binlake knows"):
        BrokerConfig({"log.cleaner.threadz": "2"})
    config = BrokerConfig({"num.partitions": "2", "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN"})
    assert config.get("num.partitions") == 2


def test_config_refusals(admin, kp_admin):
    create(admin, NewTopic("strict", 1, 1))["strict"].result(TIMEOUT)
    cases = [
        (("retention.ms", "7", AlterConfigOpType.APPEND), KafkaError.INVALID_CONFIG, "list configs only"),
        (("retention.ms", "-", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG, "invalid value '-'"),
        (("no.such.key", "1", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG, "unknown topic config"),
        (("segment.bytes", "1", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG, "must be at least 14"),
    ]
    for op, code, message in cases:
        error = error_of(incremental(admin, "strict", op))
        assert (error.code(), message in error.str()) == (code, True), (op, error)
    assert error_of(incremental(admin, "missing", cases[0][0])).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert incremental(admin, "strict", ("retention.ms", "5", AlterConfigOpType.SET),
                       validate_only=True).result(TIMEOUT) is None
    assert topic_configs(admin, "strict")["retention.ms"].source == DEFAULT_CONFIG  # validate_only changed nothing

    # Broker settings are static: describable, not alterable.
    result = kp_admin.alter_configs([KpConfigResource("broker", "0", {"num.partitions": "3"})],
                                    raise_on_unknown=False)
    assert "InvalidRequestError" in result["broker"]["0"] and "--config file" in result["broker"]["0"]


def test_describe_configs_sources_synonyms_and_documentation(broker_factory):
    broker = broker_factory(config={"log.retention.hours": "2", "num.partitions": "3"})
    admin = AdminClient({"bootstrap.servers": broker.address})
    create(admin, NewTopic("described", config={"segment.ms": "60000"}))["described"].result(TIMEOUT)
    configs = topic_configs(admin, "described")
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("7200000", STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
        ("log.retention.hours", "2", STATIC_BROKER_CONFIG), ("log.retention.ms", "604800000", DEFAULT_CONFIG)]
    assert [(s.name, s.value, s.source) for s in configs["segment.ms"].synonyms.values()] == [
        ("segment.ms", "60000", TOPIC_CONFIG), ("log.roll.ms", "604800000", DEFAULT_CONFIG)]

    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    broker_configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert (broker_configs["num.partitions"].value, broker_configs["num.partitions"].source) == (
        "3", STATIC_BROKER_CONFIG)
    assert (broker_configs["delete.topic.enable"].source, broker_configs["delete.topic.enable"].is_read_only) == (
        DEFAULT_CONFIG, True)

    # DescribeConfigs v3+: config types and documentation. kafka-python's admin API has no flag for
    # include_documentation, so this sends its own request class through its connection manager.
    client = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        request = DescribeConfigsRequest(resources=[(2, "described", ["retention.ms", "cleanup.policy"])],
                                         include_synonyms=False, include_documentation=True)
        response = client._manager.run(client._manager.send, request)
    finally:
        client.close()
    [result] = response.results
    assert [(c.name, c.config_type, bool(c.documentation)) for c in result.configs] == [
        ("retention.ms", 5, True), ("cleanup.policy", 7, True)]  # LONG, LIST


# -- DeleteRecords -----------------------------------------------------------------------------


def test_delete_records_moves_log_start_and_survives_restart(admin, broker):
    create(admin, NewTopic("dr", 1, 1, config={"segment.bytes": "1000"}))["dr"].result(TIMEOUT)
    for tens in range(10):  # ten batches of ten, about three batches a segment
        assert produce(broker.address, "dr", [b"%03d" % (tens * 10 + i) * 20 for i in range(10)]) == [None] * 10
    size_before = log_dir_size(broker, "dr")

    tp = TopicPartition("dr", 0, 40)
    assert admin.delete_records([tp])[tp].result(TIMEOUT).low_watermark == 40
    assert earliest(admin, "dr") == 40
    assert first_consumed_offset(broker, "dr") == 40
    assert log_dir_size(broker, "dr") < size_before  # whole segments below offset 40 are gone

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.address})  # fresh metadata, not the pre-restart cache
    assert earliest(admin, "dr") == 40
    assert first_consumed_offset(broker, "dr") == 40

    below = TopicPartition("dr", 0, 10)  # already deleted: the low watermark stays
    assert admin.delete_records([below])[below].result(TIMEOUT).low_watermark == 40
    beyond = TopicPartition("dr", 0, 101)
    assert error_of(admin.delete_records([beyond])[beyond]).code() == KafkaError.OFFSET_OUT_OF_RANGE
    # librdkafka refuses an unknown partition itself; kafka-python sends it to the broker.
    client = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_records({KpTopicPartition("dr", 7): 1}, partition_leader_id=0)
    finally:
        client.close()
    everything = TopicPartition("dr", 0, -1)  # -1: up to the high watermark
    assert admin.delete_records([everything])[everything].result(TIMEOUT).low_watermark == 100
    assert earliest(admin, "dr") == 100


def test_delete_records_refused_on_compacted_topic(admin, broker):
    create(admin, NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}))["compacted"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.address})
    producer.produce("compacted", b"v", key=b"k", partition=0)
    assert producer.flush(TIMEOUT) == 0
    tp = TopicPartition("compacted", 0, 1)
    assert error_of(admin.delete_records([tp])[tp]).code() == KafkaError.POLICY_VIOLATION


def earliest(admin, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset


def first_consumed_offset(broker, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "unused", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    try:
        msg = consumer.poll(TIMEOUT)
        assert msg is not None and msg.error() is None, msg and msg.error()
        return msg.offset()
    finally:
        consumer.close()


def log_dir_size(broker, topic: str) -> int:
    client = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        [answer] = client.describe_log_dirs({topic: [0]})
    finally:
        client.close()
    [log_dir] = answer["log_dirs"]
    assert os.path.samefile(log_dir["log_dir"], broker.data_dir)
    [entry] = log_dir["topics"]
    [partition] = entry["partitions"]
    assert partition["offset_lag"] == 0
    return partition["partition_size"]


# -- DescribeCluster / DescribeLogDirs ---------------------------------------------------------


def test_describe_cluster(admin, kp_admin, broker):
    described = kp_admin.describe_cluster()  # DescribeCluster v2
    assert described["cluster_id"] and described["controller_id"] == 0
    assert described["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None,
                                     "is_fenced": False}]
    # No authorizer: every cluster operation is allowed, as Kafka reports it.
    assert sorted(described["authorized_operations"]) == sorted(
        ["CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"])
    cluster = admin.describe_cluster().result(TIMEOUT)  # librdkafka asks Metadata; the answers must agree
    assert (cluster.cluster_id, cluster.controller.id, [(n.id, n.host, n.port) for n in cluster.nodes]) == (
        described["cluster_id"], 0, [(0, "127.0.0.1", broker.port)])


def test_describe_log_dirs_reports_partition_sizes(admin, kp_admin, broker):
    create(admin, NewTopic("sized", 2, 1))["sized"].result(TIMEOUT)
    produce(broker.address, "sized", [b"a" * 1000] * 10, partition=1)
    [answer] = kp_admin.describe_log_dirs()
    [log_dir] = answer["log_dirs"]
    assert os.path.samefile(log_dir["log_dir"], broker.data_dir)
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    sizes = {(t["name"], p["partition_index"]): p["partition_size"] for t in log_dir["topics"] for p in t["partitions"]}
    on_disk = {(name, index): sum(f.stat().st_size for f in (broker.data_dir / f"{name}-{index}").glob("*.log"))
               for name, index in sizes}
    assert sizes == on_disk and sizes[("sized", 0)] == 0 and sizes[("sized", 1)] > 10_000


def test_alter_replica_log_dirs_knows_the_one_directory_each_broker_has(admin, kp_admin, broker):
    create(admin, NewTopic("placed", 1, 1))["placed"].result(TIMEOUT)
    answer = kp_admin.alter_replica_log_dirs({("placed", 0, 0): str(broker.data_dir),
                                              ("later", 0, 0): str(broker.data_dir)})  # not hosted yet: fine
    assert {(tpr.topic, tpr.partition): error.__name__ for tpr, error in answer.items()} == {
        ("placed", 0): "NoError", ("later", 0): "NoError"}
    [(_, elsewhere)] = kp_admin.alter_replica_log_dirs({("placed", 0, 0): "/no/such/log/dir"}).items()
    assert elsewhere.__name__ == "LogDirNotFoundError"


def test_list_config_resources_lists_topics_and_brokers(admin, kp_admin, broker):
    create(admin, NewTopic("listed", 1, 1))["listed"].result(TIMEOUT)
    assert kp_admin.list_config_resources() == {"topic": ["listed"], "broker": ["0"]}
    assert kp_admin.list_config_resources(["TOPIC"]) == {"topic": ["listed"]}
    assert kp_admin.list_config_resources(["GROUP", "CLIENT_METRICS"]) == {}  # binlake has neither kind of config


def test_partitions_past_the_open_file_limit_are_refused_and_the_broker_serves_on(tmp_path):
    """Each partition holds a file open. A request whose new partitions would leave the broker
    without descriptors for connections is POLICY_VIOLATION naming the limit, not thousands of
    offline partitions and a listener that can no longer accept."""
    from brokerproc import BrokerProcess
    broker = BrokerProcess(tmp_path / "b", open_files=1500).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.address})
        error = error_of(create(admin, NewTopic("wide", 600, 1))["wide"])
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert "600 new partition(s) need as many open files" in error.str() and "ulimit -n" in error.str()
        create(admin, NewTopic("narrow", 3, 1))["narrow"].result(TIMEOUT)
        assert produce(broker.address, "narrow", [b"fine"]) == [None]
        error = error_of(admin.create_partitions([NewPartitions("narrow", 700)])["narrow"])
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert "is offline" not in broker.log()
    finally:
        broker.kill()


def test_one_request_may_add_at_most_ten_thousand_partitions(admin):
    error = error_of(create(admin, NewTopic("huge", 10_001, 1))["huge"])
    assert error.code() == KafkaError.INVALID_PARTITIONS and "at most 10,000" in error.str()
    create(admin, NewTopic("small", 1, 1))["small"].result(TIMEOUT)
    error = error_of(admin.create_partitions([NewPartitions("small", 10_002)])["small"])
    assert error.code() == KafkaError.INVALID_PARTITIONS and "this request would create 10,001 partitions" in error.str()
