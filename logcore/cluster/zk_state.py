"""What a broker knows of the cluster's topics, learnt from ZooKeeper watches: each topic's replicas
and each partition's state (docs/cluster.md, "How brokers learn leadership"). kio has no
LeaderAndIsr or UpdateMetadata, so the controller's decisions reach brokers this way, each
partition's in the order of its state znode's versions. Listeners hear of every partition whose
state arrived or changed (on kazoo's thread, as in membership.py).
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Callable

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from . import zk_layout as layout
from .zk_layout import PartitionState

log = logging.getLogger(__name__)

Listener = Callable[[str, int], None]


class ClusterState:
    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._replicas: dict[str, dict[int, list[int]]] = {}  # topic -> partition -> replicas
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._watched: set[tuple[str, int]] = set()  # partitions whose state znode is watched
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        """`listener(topic, partition)` after a partition's state arrived or changed."""
        self._listeners.append(listener)

    def start(self) -> None:
        self.zk.ensure_path(layout.TOPICS)
        ChildrenWatch(self.zk, layout.TOPICS, self._on_topics)

    def topics(self) -> dict[str, dict[int, list[int]]]:
        with self._lock:
            return {topic: dict(partitions) for topic, partitions in self._replicas.items()}

    def state(self, topic: str, partition: int) -> PartitionState | None:
        with self._lock:
            return self._states.get((topic, partition))

    def _on_topics(self, topics: list[str]) -> None:
        with self._lock:
            new = [t for t in topics if t not in self._replicas]
            for topic in new:
                self._replicas[topic] = {}
        for topic in new:
            DataWatch(self.zk, layout.topic_path(topic), partial(self._on_assignment, topic))

    def _on_assignment(self, topic: str, data: bytes | None, _stat, _event=None) -> bool | None:
        if data is None:  # the topic is gone: forget it, and end this watch
            with self._lock:
                self._replicas.pop(topic, None)
                for key in [k for k in self._states if k[0] == topic]:
                    del self._states[key]
            return False
        assignment = _decoded(layout.decode_topic_assignment, topic, data, keeping="what was known of the topic")
        if assignment is None:
            return None
        with self._lock:
            self._replicas[topic] = assignment
            new = [(topic, p) for p in assignment if (topic, p) not in self._watched]
            self._watched.update(new)
        for key in new:
            DataWatch(self.zk, layout.partition_state_path(*key), partial(self._on_state, *key))
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
        for listener in self._listeners:
            try:
                listener(topic, partition)
            except Exception:  # (an exception would end this watch)
                log.exception("a listener of %s-%d's state failed", topic, partition)
        return None


def _decoded(decode, *args, keeping: str):
    """decode(*args), or None after saying what is wrong with the znode (a watch must not raise)."""
    try:
        return decode(*args)
    except layout.LayoutError as exc:
        log.error("%s; keeping %s", exc, keeping)
        return None
