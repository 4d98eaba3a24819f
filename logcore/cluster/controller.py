"""What the controller does in ZooKeeper (docs/cluster.md, "Controller"): a topic is created by
writing its replica assignment (`create_topic`, on any broker, as Kafka's did) and grows by
rewriting it (`add_partitions`); the controller gives each new partition its first state, and when
brokers go or come back it elects leaders and shrinks ISRs (the decisions are in `election.py`). A
topic is deleted by asking for it under `/admin/delete_topics` (`request_deletion`); the controller
removes its znodes, and every broker its replicas. Leaders are also elected on request
(`elect_leaders`, ElectLeaders) and, with `auto.leader.rebalance.enable`, moved back to their
preferred replicas when a broker leads too few of the partitions it should (Kafka's imbalance check).
A partition is reassigned (`reassign`, AlterPartitionReassignments, KIP-455) by adding its target
replicas to its replica set, waiting until every target replica is in the ISR, then leaving only the
target replicas (a new leader from them if the old one is not), as Kafka's controller does. A plan
written to `/admin/reassign_partitions` (pre-2.4 tools) starts the same way, and the znode goes.

Every broker runs a `Controller`; it acts only while its broker is the controller, and every write
is a ZooKeeper transaction that checks `/controller_epoch` still holds this controller's epoch and
that the state znode has the version it read: a deposed controller, or one that raced another
writer, changes nothing, and the next reconcile reads the newer state.
"""

from __future__ import annotations

import logging
import threading
from functools import partial

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from ..protocol.errors import (BrokerError, InvalidPartitions, InvalidReplicaAssignment, NoReassignmentInProgress,
                               NotController, TopicAlreadyExists, UnknownTopicOrPartition)
from . import zk_layout as layout
from .election import initial_state, next_state, preferred_election, unclean_election
from .membership import ZooKeeperMembership

log = logging.getLogger(__name__)

RECONCILE_RETRY_S = 1.0


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
    def __init__(self, zk: KazooClient, membership: ZooKeeperMembership, unclean_default: bool = False,
                 rebalance_every_s: float | None = None, imbalance_percentage: int = 10) -> None:
        self.zk = zk
        self.membership = membership
        self.unclean_default = unclean_default  # the broker's unclean.leader.election.enable
        self.rebalance_every_s = rebalance_every_s  # None: auto.leader.rebalance.enable=false
        self.imbalance_percentage = imbalance_percentage
        self._lock = threading.Lock()
        self._watched: set[str] = set()  # topics whose assignment is watched
        self._reassigning: set[tuple[str, int]] = set()  # partitions whose state is watched to finish a reassignment
        self._stopped = threading.Event()
        self._retry_lock = threading.Lock()
        self._retry_pending = False

    def start(self) -> None:
        """Follow the topics (their assignments too), the brokers, the controller election and
        the deletion requests."""
        self.zk.ensure_path(layout.TOPICS)
        self.zk.ensure_path(layout.DELETE_TOPICS)
        self.membership.add_listener(self._reconcile_or_retry)
        ChildrenWatch(self.zk, layout.TOPICS, self._on_topics)
        ChildrenWatch(self.zk, layout.DELETE_TOPICS, lambda _asked: self._reconcile_or_retry())
        DataWatch(self.zk, layout.REASSIGN_PARTITIONS, self._on_reassign_request)
        self.zk.add_listener(self._on_session_state)
        if self.rebalance_every_s is not None:
            threading.Thread(target=self._rebalance_forever, name="leader-rebalance", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _on_topics(self, topics: list[str]) -> None:
        for topic in set(topics) - self._watched:
            self._watched.add(topic)
            DataWatch(self.zk, layout.topic_path(topic), partial(self._on_assignment, topic))
        self._reconcile_or_retry()

    def _on_assignment(self, topic: str, data: bytes | None, _stat, _event=None) -> bool | None:
        if data is None:
            self._watched.discard(topic)
            return False  # (deleted: end the watch)
        self._reconcile_or_retry()
        return None

    def _on_session_state(self, state: str) -> None:
        """Back on ZooKeeper after a lost connection: what changed meanwhile came as at most one
        event per watch, perhaps to a reconcile that failed on the lost connection; reconcile again.
        (Listeners must not block: the work goes to a thread.)"""
        if state == KazooState.CONNECTED:
            self.zk.handler.spawn(self._reconcile_or_retry)

    def _reconcile_or_retry(self) -> None:
        """`reconcile` for a watch or a listener, whose event does not come again: a failure (a
        ZooKeeper error, a connection lost midway) is logged and the reconcile tried again
        RECONCILE_RETRY_S later until one succeeds. (A new topic's partitions once stayed leaderless
        for good after one such failure on a loaded machine.)"""
        try:
            self.reconcile()
        except Exception:
            log.warning("the controller could not bring the partitions' states in line; trying again in %.0f s",
                        RECONCILE_RETRY_S, exc_info=True)
            with self._retry_lock:
                if self._retry_pending or self._stopped.is_set():
                    return
                self._retry_pending = True
            retry = threading.Timer(RECONCILE_RETRY_S, self._retry)
            retry.daemon = True
            retry.start()

    def _retry(self) -> None:
        with self._retry_lock:
            self._retry_pending = False
        self._reconcile_or_retry()

    def reconcile(self) -> None:
        """Bring every partition's state in line with the live brokers, if this broker is the controller."""
        followed: list[str] = []
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
                followed.append(topic)
        # Outside the lock: a new watch runs _finish_reassignment at once, in this thread, and that takes
        # the lock (a controller taking over a reassignment under way once deadlocked here).
        for topic in followed:
            self._follow_reassignments(topic)

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

    # -- elections on request ------------------------------------------------------------------

    # -- reassignments (KIP-455) ---------------------------------------------------------------

    def reassign(self, changes: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], BrokerError | None]:
        """AlterPartitionReassignments: start moving each partition to its target replicas (None
        cancels a reassignment under way). None per partition once started. Blocking."""
        with self._lock:
            self._check_controller()
            live = {node.node_id for node in self.membership.live_nodes()}
            results: dict[tuple[str, int], BrokerError | None] = {}
            for (topic, partition), target in changes.items():
                try:
                    self._start_reassignment(topic, partition, target, live)
                    results[(topic, partition)] = None
                except BrokerError as exc:
                    results[(topic, partition)] = exc
        for (topic, partition), error in results.items():
            if error is None:
                self._follow_reassignment(topic, partition)
        return results

    def _on_reassign_request(self, data: bytes | None, _stat, _event=None) -> None:
        if data is None or not self.membership.is_controller:
            return  # (a controller elected later finds it on the znode's next change)
        try:
            plan = layout.decode_reassign_request(data)
        except layout.LayoutError as exc:
            log.error("%s; removing it", exc)
            plan = {}
        try:
            for (topic, partition), error in self.reassign(plan).items() if plan else ():
                if error is not None:
                    log.warning("%s-%d: the reassignment asked in %s was refused: %s", topic, partition,
                                layout.REASSIGN_PARTITIONS, error.message)
            self.zk.delete(layout.REASSIGN_PARTITIONS)
        except NoNodeError:
            pass
        except Exception:  # (an exception would end the watch)
            log.exception("cannot carry out %s", layout.REASSIGN_PARTITIONS)

    def _start_reassignment(self, topic: str, partition: int, target: list[int] | None, live: set[int]) -> None:
        assignment, adding, removing, topic_id, version = self._read_assignment(topic, partition)
        original = [b for b in assignment[partition] if b not in adding.get(partition, ())]
        if target is None:
            if partition not in adding and partition not in removing:
                raise NoReassignmentInProgress(f"{topic}-{partition} is not being reassigned")
            replicas = original
        else:
            if not target or len(set(target)) != len(target):
                raise InvalidReplicaAssignment(f"{topic}-{partition}: the target {target} must name distinct brokers")
            if missing := sorted(set(target) - live):
                raise InvalidReplicaAssignment(f"{topic}-{partition}: broker(s) {missing} of the target are not alive")
            replicas = target + [b for b in original if b not in target]
        adding.pop(partition, None)
        removing.pop(partition, None)
        if target is not None and set(target) != set(original):
            adding[partition] = [b for b in target if b not in original]
            removing[partition] = [b for b in original if b not in target]
        elif target is not None:
            replicas = target  # (the same brokers: only their order, the preferred leader, changes)
        assignment[partition] = replicas
        self._write_reassignment(topic, partition, topic_id, assignment, adding, removing, version,
                                 lambda state: (state.leader, tuple(b for b in state.isr if b in replicas)))
        log.info("%s-%d: %s reassignment to %s (replicas now %s)", topic, partition,
                 "cancelled the" if target is None else "started a", original if target is None else target, replicas)

    def _read_assignment(self, topic: str, partition: int):
        try:
            data, stat = self.zk.get(layout.topic_path(topic))
            assignment = layout.decode_topic_assignment(topic, data)
            adding, removing = layout.decode_reassignments(topic, data)
            topic_id = layout.encode_uuid(layout.decode_topic_id(topic, data))
        except (NoNodeError, layout.LayoutError):
            raise UnknownTopicOrPartition(f"no topic {topic}") from None
        if partition not in assignment:
            raise UnknownTopicOrPartition(f"no partition {topic}-{partition}")
        return assignment, adding, removing, topic_id, stat.version

    def _write_reassignment(self, topic: str, partition: int, topic_id: str, assignment, adding, removing,
                            version: int, leader_and_isr) -> None:
        """The assignment and the partition's next state (leader and ISR from `leader_and_isr(state)`,
        the epoch raised so every replica learns its new replica set) in one transaction."""
        path = layout.partition_state_path(topic, partition)
        data, stat = self.zk.get(path)
        state = layout.decode_partition_state(path, data)
        leader, isr = leader_and_isr(state)
        new = layout.PartitionState(leader, state.leader_epoch + 1, isr, self.membership.controller_epoch)
        transaction = self.zk.transaction()
        transaction.check(layout.CONTROLLER_EPOCH, self.membership.controller_epoch_version)
        transaction.set_data(layout.topic_path(topic), layout.encode_topic_assignment(topic_id, assignment, adding,
                                                                                      removing), version)
        transaction.set_data(path, layout.encode_partition_state(new), stat.version)
        if failures := [r for r in transaction.commit() if isinstance(r, Exception)]:
            raise NotController(f"{topic}-{partition} changed under the reassignment "
                                f"({', '.join(type(f).__name__ for f in failures)}); retry")

    def _follow_reassignments(self, topic: str) -> None:
        """(On becoming controller too) watch the partitions of `topic` being reassigned."""
        try:
            adding, removing = layout.decode_reassignments(topic, self.zk.get(layout.topic_path(topic))[0])
        except (NoNodeError, layout.LayoutError):
            return
        for partition in set(adding) | set(removing):
            self._follow_reassignment(topic, partition)

    def _follow_reassignment(self, topic: str, partition: int) -> None:
        if (topic, partition) in self._reassigning:
            return
        self._reassigning.add((topic, partition))

        def on_state(_data, _stat, _event=None) -> bool | None:
            try:
                if self._finish_reassignment(topic, partition):
                    self._reassigning.discard((topic, partition))
                    return False  # (done, cancelled or gone: end the watch)
            except Exception:  # (an exception would end the watch: the next state change tries again)
                log.exception("%s-%d: cannot finish its reassignment yet", topic, partition)
            return None

        DataWatch(self.zk, layout.partition_state_path(topic, partition), on_state)

    def _finish_reassignment(self, topic: str, partition: int) -> bool:
        """Once every target replica is in the ISR, leave only them. True when no reassignment of the
        partition is under way any more (or this broker is no longer the controller)."""
        with self._lock:
            if not self.membership.is_controller:
                return True  # (the next controller follows it)
            try:
                assignment, adding, removing, topic_id, version = self._read_assignment(topic, partition)
            except UnknownTopicOrPartition:
                return True
            if partition not in adding and partition not in removing:
                return True
            gone = set(removing.pop(partition, ()))
            adding.pop(partition, None)
            target = [b for b in assignment[partition] if b not in gone]
            path = layout.partition_state_path(topic, partition)
            state = layout.decode_partition_state(path, self.zk.get(path)[0])
            live = {node.node_id for node in self.membership.live_nodes()}
            leader = state.leader if state.leader in target else next(
                (b for b in target if b in state.isr and b in live), None)
            if not set(target) <= set(state.isr) or leader is None:
                return False
            assignment[partition] = target
            self._write_reassignment(topic, partition, topic_id, assignment, adding, removing, version,
                                     lambda s: (leader, tuple(b for b in s.isr if b in target)))
            log.info("%s-%d: reassigned to %s, leader %d", topic, partition, target, leader)
            return True

    def reassignments(self) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of each partition being reassigned."""
        found = {}
        for topic in self.zk.get_children(layout.TOPICS):
            try:
                data = self.zk.get(layout.topic_path(topic))[0]
                assignment = layout.decode_topic_assignment(topic, data)
                adding, removing = layout.decode_reassignments(topic, data)
            except (NoNodeError, layout.LayoutError):
                continue
            for partition in sorted(set(adding) | set(removing)):
                found[(topic, partition)] = (assignment.get(partition, []), adding.get(partition, []),
                                             removing.get(partition, []))
        return found

    def _check_controller(self) -> None:
        if not self.membership.is_controller:
            raise NotController(f"broker {self.membership.node.node_id} is not the controller (broker "
                                f"{self.membership.controller_id} is); ask it")

    # -- elections on request ------------------------------------------------------------------

    def elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool) -> dict[tuple[str, int], BrokerError | None]:
        """ElectLeaders: for each partition (every one when None), None once its new state is written,
        or why it was not elected. Blocking (ZooKeeper round trips). NotController elsewhere."""
        with self._lock:
            self._check_controller()
            assignments = self._assignments()
            if partitions is None:
                partitions = [(t, p) for t, parts in sorted(assignments.items()) for p in sorted(parts)]
            live = {node.node_id for node in self.membership.live_nodes()}
            elect = unclean_election if unclean else preferred_election
            results: dict[tuple[str, int], BrokerError | None] = {}
            for topic, partition in partitions:
                replicas = assignments.get(topic, {}).get(partition)
                try:
                    if replicas is None:
                        raise UnknownTopicOrPartition(f"no partition {topic}-{partition}")
                    path = layout.partition_state_path(topic, partition)
                    data, stat = self.zk.get(path)
                    state = layout.decode_partition_state(path, data)
                    new = elect(replicas, state, live, self.membership.controller_epoch)
                    if not self._write(path, layout.encode_partition_state(new), stat.version):
                        raise NotController("the partition's state changed under the election; retry")
                    log.info("%s-%d: %s election: leader %d, epoch %d", topic, partition,
                             "unclean" if unclean else "preferred", new.leader, new.leader_epoch)
                    results[(topic, partition)] = None
                except BrokerError as exc:
                    results[(topic, partition)] = exc
                except (NoNodeError, layout.LayoutError) as exc:
                    results[(topic, partition)] = UnknownTopicOrPartition(f"{topic}-{partition} has no state: {exc}")
            return results

    def _assignments(self) -> dict[str, dict[int, list[int]]]:
        found = {}
        for topic in self.zk.get_children(layout.TOPICS):
            try:
                found[topic] = layout.decode_topic_assignment(topic, self.zk.get(layout.topic_path(topic))[0])
            except (NoNodeError, layout.LayoutError):
                continue
        return found

    def _rebalance_forever(self) -> None:
        while not self._stopped.wait(self.rebalance_every_s):
            try:
                if self.membership.is_controller:
                    self.rebalance()
            except Exception:  # (a ZooKeeper hiccup: the next check tries again)
                log.exception("the leader imbalance check failed")

    def rebalance(self) -> None:
        """Kafka's imbalance check: a broker that leads fewer than (100 - leader.imbalance.per.broker.percentage)%
        of the partitions it is the preferred replica of gets them back, where it is in sync."""
        assignments = self._assignments()
        led_elsewhere: dict[int, list[tuple[str, int]]] = {}
        preferred_of: dict[int, int] = {}
        for topic, parts in assignments.items():
            for partition, replicas in parts.items():
                preferred = replicas[0]
                preferred_of[preferred] = preferred_of.get(preferred, 0) + 1
                try:
                    path = layout.partition_state_path(topic, partition)
                    state = layout.decode_partition_state(path, self.zk.get(path)[0])
                except (NoNodeError, layout.LayoutError):
                    continue
                if state.leader != preferred:
                    led_elsewhere.setdefault(preferred, []).append((topic, partition))
        for broker, partitions in sorted(led_elsewhere.items()):
            if len(partitions) * 100 > self.imbalance_percentage * preferred_of[broker]:
                elected = [tp for tp, error in self.elect_leaders(partitions, unclean=False).items() if error is None]
                if elected:
                    log.info("leader imbalance: broker %d leads its preferred partitions %s again", broker,
                             ", ".join(f"{t}-{p}" for t, p in elected))

    def _write(self, path: str, data: bytes, version: int | None) -> bool:
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
        return not failures

    def _unclean(self, topic: str) -> bool:
        try:
            configs = layout.decode_topic_config(topic, self.zk.get(layout.topic_config_path(topic))[0])
        except (NoNodeError, layout.LayoutError):
            return self.unclean_default
        value = configs.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else str(value).lower() == "true"
