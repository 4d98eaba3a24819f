"""What the controller does in ZooKeeper (docs/cluster.md, "Controller"): a topic is created by
writing its replica assignment (`create_topic`, on any broker, as Kafka's did) and grows by
rewriting it (`add_partitions`); the controller gives each new partition its first state, and when
brokers go or come back it elects leaders and shrinks ISRs (the decisions are in `election.py`). A
topic is deleted by asking for it under `/admin/delete_topics` (`request_deletion`); the controller
removes its znodes, and every broker its replicas.

Every broker runs a `Controller`; it acts only while its broker is the controller, and every write
is a ZooKeeper transaction that checks `/controller_epoch` still holds this controller's epoch and
that the state znode has the version it read: a deposed controller, or one that raced another
writer, changes nothing, and the next reconcile reads the newer state.
"""

from __future__ import annotations

import logging
import threading
from functools import partial

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..protocol.errors import InvalidPartitions, TopicAlreadyExists
from . import zk_layout as layout
from .election import initial_state, next_state
from .membership import ZooKeeperMembership

log = logging.getLogger(__name__)


def create_topic(zk: KazooClient, topic: str, topic_id: str, assignment: dict[int, list[int]],
                 configs: dict[str, str]) -> None:
    """Write a new topic's configs and replica assignment in one transaction; the controller
    takes it from there."""
    zk.ensure_path("/config/topics")
    zk.ensure_path(layout.TOPICS)
    transaction = zk.transaction()
    transaction.create(layout.topic_config_path(topic), layout.encode_topic_config(configs))
    transaction.create(layout.topic_path(topic), layout.encode_topic_assignment(topic_id, assignment))
    failures = [result for result in transaction.commit() if isinstance(result, Exception)]
    if any(isinstance(failure, NodeExistsError) for failure in failures):
        raise TopicAlreadyExists(f"topic {topic!r} already exists")
    if failures:
        raise failures[0]


def add_partitions(zk: KazooClient, topic: str, topic_id: str, assignment: dict[int, list[int]]) -> None:
    """Rewrite the topic's assignment with its new partitions, if nobody changed it in between."""
    data, stat = zk.get(layout.topic_path(topic))
    if layout.decode_topic_assignment(topic, data).keys() - assignment.keys():
        raise InvalidPartitions(f"topic {topic}'s partitions changed meanwhile; describe it and try again")
    try:
        zk.set(layout.topic_path(topic), layout.encode_topic_assignment(topic_id, assignment), version=stat.version)
    except BadVersionError:
        raise InvalidPartitions(f"topic {topic}'s partitions changed meanwhile; describe it and try again") from None


def set_topic_configs(zk: KazooClient, topic: str, configs: dict[str, str]) -> None:
    zk.set(layout.topic_config_path(topic), layout.encode_topic_config(configs))


def request_deletion(zk: KazooClient, topic: str) -> None:
    try:
        zk.create(f"{layout.DELETE_TOPICS}/{topic}", b"", makepath=True)
    except NodeExistsError:
        pass  # (asked already)


class Controller:
    def __init__(self, zk: KazooClient, membership: ZooKeeperMembership, unclean_default: bool = False) -> None:
        self.zk = zk
        self.membership = membership
        self.unclean_default = unclean_default  # the broker's unclean.leader.election.enable
        self._lock = threading.Lock()
        self._watched: set[str] = set()  # topics whose assignment is watched

    def start(self) -> None:
        """Follow the topics (their assignments too), the brokers, the controller election and
        the deletion requests."""
        self.zk.ensure_path(layout.TOPICS)
        self.zk.ensure_path(layout.DELETE_TOPICS)
        self.membership.add_listener(self.reconcile)
        ChildrenWatch(self.zk, layout.TOPICS, self._on_topics)
        ChildrenWatch(self.zk, layout.DELETE_TOPICS, lambda _asked: self.reconcile())

    def _on_topics(self, topics: list[str]) -> None:
        for topic in set(topics) - self._watched:
            self._watched.add(topic)
            DataWatch(self.zk, layout.topic_path(topic), partial(self._on_assignment, topic))
        self.reconcile()

    def _on_assignment(self, topic: str, data: bytes | None, _stat, _event=None) -> bool | None:
        if data is None:
            self._watched.discard(topic)
            return False  # (deleted: end the watch)
        self.reconcile()
        return None

    def reconcile(self) -> None:
        """Bring every partition's state in line with the live brokers, if this broker is the controller."""
        with self._lock:
            if not self.membership.is_controller:
                return
            for topic in self.zk.get_children(layout.DELETE_TOPICS):
                self._delete(topic)
            live = {node.node_id for node in self.membership.live_nodes()}
            for topic in sorted(self.zk.get_children(layout.TOPICS)):
                try:
                    assignment = layout.decode_topic_assignment(topic, self.zk.get(layout.topic_path(topic))[0])
                except NoNodeError:
                    continue  # (deleted meanwhile)
                except layout.LayoutError as exc:
                    log.error("%s; its partitions get no leader until it is fixed", exc)
                    continue
                unclean = self._unclean(topic)
                for partition, replicas in sorted(assignment.items()):
                    self._reconcile_partition(topic, partition, replicas, live, unclean)

    def _reconcile_partition(self, topic: str, partition: int, replicas: list[int], live: set[int],
                             unclean: bool) -> None:
        path = layout.partition_state_path(topic, partition)
        epoch = self.membership.controller_epoch
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            self.zk.ensure_path(path.rsplit("/", 1)[0])
            self._write(path, layout.encode_partition_state(initial_state(replicas, live, epoch)), None)
            return
        try:
            state = layout.decode_partition_state(path, data)
        except layout.LayoutError as exc:
            log.error("%s; leaving it alone", exc)
            return
        new = next_state(replicas, state, live, epoch, unclean)
        if new is not None:
            self._write(path, layout.encode_partition_state(new), stat.version)
            log.info("%s-%d: leader %d, epoch %d, ISR %s (controller epoch %d)", topic, partition, new.leader,
                     new.leader_epoch, list(new.isr), epoch)

    def _delete(self, topic: str) -> None:
        """Remove a topic's znodes (states, assignment, configs) and the request, in one transaction."""
        transaction = self.zk.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, self.membership.controller_epoch_version)
        if self.zk.exists(layout.topic_path(topic)):
            partitions_path = f"{layout.topic_path(topic)}/partitions"
            for partition in self.zk.get_children(partitions_path) if self.zk.exists(partitions_path) else []:
                state = f"{partitions_path}/{partition}/state"
                if self.zk.exists(state):
                    transaction.delete(state)
                transaction.delete(f"{partitions_path}/{partition}")
            if self.zk.exists(partitions_path):
                transaction.delete(partitions_path)
            transaction.delete(layout.topic_path(topic))
        if self.zk.exists(layout.topic_config_path(topic)):
            transaction.delete(layout.topic_config_path(topic))
        transaction.delete(f"{layout.DELETE_TOPICS}/{topic}")
        failures = [r for r in transaction.commit() if isinstance(r, Exception)]
        if failures:
            log.warning("topic %s not deleted yet (%s): retrying on the next change", topic,
                        ", ".join(type(f).__name__ for f in failures))
        else:
            log.info("deleted topic %s", topic)

    def _write(self, path: str, data: bytes, version: int | None) -> None:
        transaction = self.zk.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, self.membership.controller_epoch_version)
        if version is None:
            transaction.create(path, data)
        else:
            transaction.set_data(path, data, version)
        failures = [r for r in transaction.commit() if isinstance(r, Exception)]
        if failures:
            log.warning("not written: %s (%s): a newer controller or state won", path,
                        ", ".join(type(f).__name__ for f in failures))

    def _unclean(self, topic: str) -> bool:
        try:
            configs = layout.decode_topic_config(topic, self.zk.get(layout.topic_config_path(topic))[0])
        except (NoNodeError, layout.LayoutError):
            return self.unclean_default
        value = configs.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else str(value).lower() == "true"
