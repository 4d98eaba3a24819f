"""What a broker knows of the cluster's topics, learnt from ZooKeeper watches: each topic's id,
configs and replicas, and each partition's state (docs/cluster.md, "How brokers learn leadership"). kio has no
LeaderAndIsr or UpdateMetadata, so the controller's decisions reach brokers this way, each
partition's in the order of its state znode's versions. Listeners hear of every partition whose
state arrived or changed, or whose replicas changed (a reassignment writes both at once, and the two
watches may tell of them in either order), on kazoo's thread, as in membership.py.
"""

from __future__ import annotations

import logging
import threading
import uuid
from functools import partial
from typing import Callable

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from . import zk_layout as layout
from .topics import TopicInfo
from .zk_layout import PartitionState

log = logging.getLogger(__name__)

Listener = Callable[[str, int], None]


class ClusterState:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._replicas: dict[str, dict[int, list[int]]] = {}  # topic -> partition -> replicas
        # Topic descriptions, replaced whole on every change: a reader on another thread (the event
        # loop) holds a consistent snapshot without a lock.
        self.infos: dict[str, TopicInfo] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched: set[tuple[str, int]] = set()  # partitions whose state znode is watched
        self._listeners: list[Listener] = []
        self._topic_listeners: list[Callable[[str], None]] = []
        self._deletion_listeners: list[Callable[[str], None]] = []

    def add_listener(self, listener: Listener) -> None:
        """`listener(topic, partition)` after a partition's state arrived or changed, or its replicas did."""
        self._listeners.append(listener)

    def add_topic_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(topic)` after a topic's configs or partitions changed, or it was deleted."""
        self._topic_listeners.append(listener)

    def add_deletion_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(topic)` once a topic this broker knew is deleted (told before the topic listeners)."""
        self._deletion_listeners.append(listener)

    def start(self) -> None:
        self.zk.ensure_path(layout.TOPICS)
        ChildrenWatch(self.zk, layout.TOPICS, self._on_topics)

    def topics(self) -> dict[str, dict[int, list[int]]]:
        with self._lock:
            return {topic: dict(partitions) for topic, partitions in self._replicas.items()}

    def state(self, topic: str, partition: int) -> PartitionState | None:
        with self._lock:
            return self._states.get((topic, partition))

    def replicas(self, topic: str, partition: int) -> list[int]:
        with self._lock:
            return list(self._replicas.get(topic, {}).get(partition, ()))

    def _on_topics(self, topics: list[str]) -> None:
        with self._lock:
            new = [t for t in topics if t not in self._replicas]
            for topic in new:
                self._replicas[topic] = {}
        for topic in new:
            DataWatch(self.zk, layout.topic_config_path(topic), partial(self._on_config, topic))
            DataWatch(self.zk, layout.topic_path(topic), partial(self._on_assignment, topic))

    def _on_config(self, topic: str, data: bytes | None, _stat, _event=None) -> bool | None:
        if data is None:
            return None  # (not written yet, or deleted with its topic: the assignment's watch forgets it)
        configs = _decoded(layout.decode_topic_config, topic, data, keeping="the topic's previous configs")
        if configs is None:
            return None
        with self._lock:
            if topic not in self._replicas:
                return False
            self._configs[topic] = configs
            self._publish(topic)
        self._tell(self._topic_listeners, topic)
        return None

    def _publish(self, topic: str) -> None:
        """Rebuild `infos` after a change of `topic` (holding the lock)."""
        infos = dict(self.infos)
        assignment = self._replicas.get(topic)
        if assignment and topic in self._ids:
            infos[topic] = TopicInfo(topic, self._ids[topic], len(assignment), len(assignment[min(assignment)]),
                                     dict(self._configs.get(topic, {})))
        else:
            infos.pop(topic, None)
        self.infos = infos

    def _on_assignment(self, topic: str, data: bytes | None, _stat, _event=None) -> bool | None:
        if data is None:  # the topic is gone: forget it, and end this watch
            with self._lock:
                self._replicas.pop(topic, None)
                known = self._ids.pop(topic, None) is not None
                self._configs.pop(topic, None)
                for key in [k for k in self._states if k[0] == topic]:
                    del self._states[key]
                self._publish(topic)
            if known:
                self._tell(self._deletion_listeners, topic)
            self._tell(self._topic_listeners, topic)
            return False
        assignment = _decoded(layout.decode_topic_assignment, topic, data, keeping="what was known of the topic")
        topic_id = _decoded(layout.decode_topic_id, topic, data, keeping="what was known of the topic")
        if assignment is None or topic_id is None:
            return None
        with self._lock:
            before = self._replicas.get(topic, {})
            moved = [p for p, replicas in assignment.items()
                     if p in before and replicas != before[p] and (topic, p) in self._states]
            self._replicas[topic] = assignment
            self._ids[topic] = topic_id
            self._publish(topic)
            new = [(topic, p) for p in assignment if (topic, p) not in self._watched]
            self._watched.update(new)
        for key in new:
            DataWatch(self.zk, layout.partition_state_path(*key), partial(self._on_state, *key))
        self._tell(self._topic_listeners, topic)
        for partition in moved:
            self._tell(self._listeners, topic, partition)
        return None

    def _on_state(self, topic: str, partition: int, data: bytes | None, _stat, _event=None) -> bool | None:
        with self._lock:
            if topic not in self._replicas:  # (deleted with its topic: end this watch)
                self._watched.discard((topic, partition))
                return False
        if data is None:
            return None  # not created yet: the watch waits for it
        state = _decoded(layout.decode_partition_state, layout.partition_state_path(topic, partition), data,
                         keeping="the previous state")
        if state is None:
            return None
        with self._lock:
            self._states[topic, partition] = state
        self._tell(self._listeners, topic, partition)
        return None

    @staticmethod
    def _tell(listeners: list[Callable], *what) -> None:
        for listener in listeners:
            try:
                listener(*what)
            except Exception:  # (an exception would end the watch that called)
                log.exception("a listener of %s failed", "-".join(map(str, what)))


def _decoded(decode, *args, keeping: str):
    """decode(*args), or None after saying what is wrong with the znode (a watch must not raise)."""
    try:
        return decode(*args)
    except layout.LayoutError as exc:
        log.error("%s; keeping %s", exc, keeping)
        return None
