"""Transaction coordinator: Kafka's transaction protocol (KIP-98) over `__transaction_state`.

Each transactional id has one `TxnMetadata`: its producer id and epoch, timeout, state and the
partitions its open transaction wrote to. A request computes the next metadata without mutating
anything, appends it to the transaction log, then `replay`s it; `replay` is the only mutator and
also the loading path, so state after a restart is exactly what the log says.

Ending a transaction logs PrepareCommit/PrepareAbort (the decision), writes a commit/abort marker to
every partition of the transaction, then logs CompleteCommit/CompleteAbort. As in Kafka, EndTxn is
answered once the decision is logged and the markers follow right after the response. A broker
alone writes them at once, and a later request for the same transactional id finishes them first if
they are still due; in a cluster they go in a task of their own (`_finish`) and such a request hears
CONCURRENT_TRANSACTIONS and retries. A decision whose markers could not all be written, or that a
crash interrupted, is completed by `sweep` and on load.

In a cluster (docs/cluster.md) the coordinator of a transactional id is the leader of its partition
of `__transaction_state`: it loads the ids of a partition once it leads it and the partition is
committed, drops them when the leadership goes (NOT_COORDINATOR), answers a request once the ISR has
its record, writes markers only once the decision is in the ISR, and sends them to the partitions'
leaders wherever they are.

Zombies are fenced by epoch: InitProducerId bumps it (aborting an open transaction with the bumped
epoch first), and so does aborting a transaction that ran past its timeout.

Transactions v2 (KIP-890 part 2, `transaction_version` 2): a transaction started by a partition's
leader on the producer's behalf (Produce v12+, TxnOffsetCommit v5+: no AddPartitionsToTxn from the
client) and ended by EndTxn v5 bumps the producer's epoch at its end, so its markers carry the
bumped epoch and the producer's next transaction writes with it: a delayed write of the ended
transaction is fenced by its epoch, and a delayed marker of it by the partitions (a marker of
transactions v2 must carry an epoch newer than the data it ends). When the epochs run out the
decision names a new producer id, which the producer gets in the EndTxn answer and which the
completion installs.

Event loop only; no `await` between computing a transition and replaying it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field, replace

from ..protocol.errors import (
    BrokerError,
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    NotLeaderOrFollower,
    ProducerFenced,
    TransactionalIdNotFound,
)
from ..replication.partition import Partition
from .producer_ids import ProducerIdManager
from .state_topic import StateTopic
from .transaction_log import (
    TRANSACTION_TOPIC,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from .transaction_markers import Marker, MarkerWriter
from .transaction_offsets import TxnOffsets

log = logging.getLogger(__name__)

S = TxnState
NO_EPOCH = -1
MAX_EPOCH = 32767  # epochs are int16; an id whose epoch reaches MAX_EPOCH - 1 gets a new producer id
REPLICATION_TIMEOUT_S = 30.0  # how long a request waits for the ISR to have its record (request.timeout.ms)
MARKER_RETRY_S = 0.5  # a decision whose markers could not all be written tries again after this

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # The epoch before the last bump, so a retried InitProducerId (KIP-360) gets the same answer.
    # Not logged (as in Kafka): a reloaded coordinator knows none.
    last_producer_epoch: int = NO_EPOCH
    previous_producer_id: int = -1  # transactions v2: the id before the epochs ran out
    next_producer_id: int = -1  # transactions v2: the id a decision hands over when its epochs ran out
    transaction_version: int = 0  # 2: the open or last transaction runs transactions v2

    def to_log(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
                           self.last_update_ms, self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.transaction_version)

    @property
    def bumps_epoch(self) -> bool:
        """Whether ending this transaction bumps the producer's epoch (transactions v2)."""
        return self.transaction_version >= 2

    @property
    def completing(self) -> bool:
        return self.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)


@dataclass
class _Pending:
    """A logged decision whose markers are not all written yet."""

    metadata: TxnMetadata
    remaining: set[TopicPartition] = field(default_factory=set)
    finishing: asyncio.Task | None = None  # the task writing its markers


class TransactionCoordinator:
    def __init__(self, replicas, metadata, config, create_topic, producer_ids: ProducerIdManager,
                 markers: MarkerWriter, groups, alone: bool = True) -> None:
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.producer_ids = producer_ids
        self.markers = markers
        self.topic = StateTopic(TRANSACTION_TOPIC, config.get("transaction.state.log.num.partitions"),
                                config.get("transaction.state.log.segment.bytes"), replicas, metadata, create_topic,
                                config.get("transaction.state.log.replication.factor"),
                                config.get("transaction.state.log.min.isr"))
        # The partitions of __transaction_state whose ids this broker coordinates: in a cluster,
        # those it leads, once loaded; None for a broker alone, which coordinates every id.
        self.led: set[int] | None = None if alone else set()
        self.txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, str] = {}  # producer id -> transactional id
        self._pending: dict[str, _Pending] = {}
        self._task: asyncio.Task | None = None
        self.offsets = TxnOffsets(groups, self)
        markers.listeners.append(self.offsets.on_marker)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """After the group coordinator loaded (and with it the pending transactional offsets, which
        completing an interrupted transaction settles)."""
        self.load()
        self._task = asyncio.create_task(self._sweep_forever())

    async def stop(self) -> None:
        tasks = [t for t in [self._task] + [p.finishing for p in self._pending.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.markers.close()

    def load(self) -> None:
        """A broker alone: rebuild every transactional id from the log, then finish the decisions a
        crash interrupted (in a cluster, partitions load as this broker comes to lead them)."""
        if self.topic.exists and self.led is None:
            self._load(None)

    def _load(self, partitions: list[int] | None) -> None:
        started = time.monotonic()
        records = self.topic.replay(lambda key, value: self.replay(decode_key(key), decode_value(value)), partitions)
        loaded = [m for m in self.txns.values() if partitions is None or self.partition_of(m.transactional_id)
                  in partitions]
        for meta in loaded:
            self.producer_ids.seen(meta.producer_id)
        where = TRANSACTION_TOPIC if partitions is None else ", ".join(f"{TRANSACTION_TOPIC}-{p}" for p in partitions)
        log.info("coordinating %d transactional id(s) from %d record(s) of %s in %.2fs", len(loaded), records,
                 where, time.monotonic() - started)
        for meta in loaded:
            if meta.completing:
                log.info("transaction %s was in %s when its coordinator changed; completing it",
                         meta.transactional_id, meta.state.kafka_name)
                self._complete(meta.transactional_id)

    # -- in a cluster --------------------------------------------------------------------------

    def owns(self, transactional_id: str) -> bool:
        return self.led is None or self.partition_of(transactional_id) in self.led

    def _check_owner(self, transactional_id: str) -> None:
        if not self.owns(transactional_id):
            raise NotCoordinator(f"this broker does not coordinate transactional id {transactional_id!r} (yet); "
                                 f"find its coordinator again")

    def became_leader(self, partition: Partition) -> None:
        """This broker leads `partition` of __transaction_state from now on: its ids load once it is
        committed (`StateTopic.load_when_committed`); until then their producers hear NOT_COORDINATOR."""
        self.topic.load_when_committed(partition, self.load_partition)

    def load_partition(self, partition: int) -> None:
        if self.led is not None and partition not in self.led:
            self.led.add(partition)
            self._load([partition])

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads `partition`: its ids go, with their unfinished markers (the new
        coordinator finishes them from the log)."""
        if self.led is None:
            return
        self.led.discard(partition)
        for txn_id in [t for t in self.txns if self.partition_of(t) == partition]:
            pending = self._pending.pop(txn_id, None)
            if pending is not None and pending.finishing is not None:
                pending.finishing.cancel()
            self._by_producer.pop(self.txns.pop(txn_id).producer_id, None)

    async def _replicated(self, transactional_id: str) -> None:
        """Return once the ISR has what was logged for `transactional_id` (at once for a broker alone)."""
        try:
            await self.topic.replicated(self.partition_of(transactional_id), REPLICATION_TIMEOUT_S)
        except NotCoordinator:
            raise
        except BrokerError as exc:
            raise CoordinatorNotAvailable(f"the transaction log of {transactional_id!r} is not replicated: "
                                          f"{exc.message}") from exc

    async def ensure_topic(self) -> None:
        """Kafka creates `__transaction_state` on the first FindCoordinator for a transactional id."""
        await self.topic.ensure()

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.topic.partitions)

    # -- the only mutator ----------------------------------------------------------------------

    def replay(self, transactional_id: str, value: TxnLogValue | None, last_producer_epoch: int = NO_EPOCH) -> None:
        old = self.txns.pop(transactional_id, None)
        if old is not None:
            self._by_producer.pop(old.producer_id, None)
        if value is None:
            self._pending.pop(transactional_id, None)
            return
        meta = TxnMetadata(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state,
                           value.partitions, value.start_ms, value.last_update_ms, last_producer_epoch,
                           value.previous_producer_id, value.next_producer_id, value.client_transaction_version)
        self.txns[transactional_id] = meta
        self._by_producer[meta.producer_id] = transactional_id
        if meta.completing:
            self._pending[transactional_id] = _Pending(meta, set(meta.partitions))
        else:
            self._pending.pop(transactional_id, None)

    def _log(self, meta: TxnMetadata) -> None:
        """The commit half: append the new metadata, then replay it. Raises the log's BrokerError."""
        tid, value = meta.transactional_id, meta.to_log()
        try:
            self.topic.append(self.partition_of(tid), [(encode_key(tid), encode_value(value))])
        except NotLeaderOrFollower as exc:
            raise NotCoordinator(f"this broker stopped coordinating {tid!r}: {exc.message}") from exc
        except BrokerError as exc:
            raise CoordinatorNotAvailable(f"cannot write the transaction log for {tid!r}: {exc.message}") from exc
        self.replay(tid, value, meta.last_producer_epoch)

    # -- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str | None, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = NO_EPOCH) -> tuple[int, int]:
        """(producer id, epoch) for a producer starting up. An open transaction is aborted first: the
        producer hears CONCURRENT_TRANSACTIONS until the abort is complete, then gets its epoch."""
        if transactional_id is None:
            return self.producer_ids.next_id(), 0
        if not transactional_id:
            raise InvalidRequest("transactional.id must not be empty; leave it unset for a non-transactional producer")
        limit = self.config.get("transaction.max.timeout.ms")
        if not 0 < timeout_ms <= limit:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms={timeout_ms} must be positive and at most the broker's "
                f"transaction.max.timeout.ms={limit}; lower it in the producer")
        await self.ensure_topic()
        self._check_owner(transactional_id)
        now = _now_ms()
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, self.producer_ids.next_id(), NO_EPOCH, timeout_ms, S.EMPTY,
                               last_update_ms=now)
        expected = producer_epoch if producer_id >= 0 else None
        if expected is not None and meta.producer_epoch != NO_EPOCH and producer_id != meta.producer_id:
            raise self._fenced(meta, producer_id, producer_epoch)
        if meta.completing:
            meta = self._complete(transactional_id)
            if meta.completing:
                raise ConcurrentTransactions(f"the last transaction of {transactional_id} is still completing; retry")
        if meta.state == S.ONGOING:
            # (in a cluster the producer retries: one that names its epoch then gets the bumped one)
            self._abort_fenced(meta, "a new producer with the same transactional id started", expected)
            meta = self.txns[transactional_id]
            if meta.completing:
                raise ConcurrentTransactions(f"aborting the open transaction of {transactional_id} first; retry")
            expected = None  # the abort bumped the epoch; the new producer gets the next one
        self._log(self._next_epoch(meta, expected, timeout_ms, now))
        meta = self.txns[transactional_id]
        await self._replicated(transactional_id)
        return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _fenced(meta: TxnMetadata, producer_id: int, epoch: int) -> ProducerFenced:
        return ProducerFenced(f"producer {producer_id} epoch {epoch} is no longer current for transactional id "
                              f"{meta.transactional_id!r} (now producer {meta.producer_id} epoch "
                              f"{meta.producer_epoch}): another instance took over, or its transaction timed out")

    def _next_epoch(self, meta: TxnMetadata, expected: int | None, timeout_ms: int, now: int) -> TxnMetadata:
        base = replace(meta, timeout_ms=timeout_ms, state=S.EMPTY, partitions=frozenset(), start_ms=-1,
                       last_update_ms=now)
        if meta.producer_epoch >= MAX_EPOCH - 1:
            log.info("transactional id %s exhausted the epochs of producer %d; allocating a new producer id",
                     meta.transactional_id, meta.producer_id)
            return replace(base, producer_id=self.producer_ids.next_id(), producer_epoch=0,
                           last_producer_epoch=NO_EPOCH)
        if expected is None:
            return replace(base, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=NO_EPOCH)
        if meta.producer_epoch == NO_EPOCH or expected == meta.producer_epoch:
            return replace(base, producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch)
        if expected == meta.last_producer_epoch:
            return base  # a retry of a bump whose answer was lost: the same epoch again
        raise self._fenced(meta, meta.producer_id, expected)

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"producer id {producer_id} is not the one of transactional id {transactional_id!r}; "
                f"the producer must call InitProducerId first")
        if meta.producer_epoch != epoch:
            raise self._fenced(meta, producer_id, epoch)
        return meta

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: list[TopicPartition], transaction_version: int = 0) -> None:
        """Add partitions to the producer's transaction, starting one if none is open: asked by the
        producer (AddPartitionsToTxn up to v3, AddOffsetsToTxn), or with `transaction_version` 2 by
        a partition's leader for a producer of transactions v2 that writes there first."""
        self._check_owner(transactional_id)
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.completing:
            meta = self._complete(transactional_id)
            if meta.completing:
                raise ConcurrentTransactions(f"the previous transaction of {transactional_id!r} is still completing; "
                                             f"retry")
        if meta.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise InvalidTxnState(f"cannot add partitions to {transactional_id!r} in state {meta.state.kafka_name}")
        if not (meta.state == S.ONGOING and meta.partitions.issuperset(partitions)):
            now = _now_ms()
            opening = meta.state != S.ONGOING
            self._log(replace(meta, state=S.ONGOING, partitions=meta.partitions | frozenset(partitions),
                              start_ms=now if opening else meta.start_ms, last_update_ms=now,
                              transaction_version=transaction_version if opening else meta.transaction_version))
        await self._replicated(transactional_id)  # (a retry too: the first answer may have been lost to a timeout)

    def check_in_transaction(self, transactional_id: str, producer_id: int, epoch: int, tp: TopicPartition) -> None:
        """Raise unless `tp` was added to the open transaction of this producer (KIP-890's check, so a
        fenced or finished producer cannot slip writes in after its transaction ended)."""
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state != S.ONGOING or tp not in meta.partitions:
            raise InvalidTxnState(f"{tp[0]}-{tp[1]} is not part of an open transaction of {transactional_id!r}; "
                                  f"add it first (AddPartitionsToTxn / AddOffsetsToTxn)")

    def verify(self, producer_id: int, epoch: int, tp: TopicPartition) -> bool:
        """Whether a transactional produce to `tp` belongs to an open transaction that added it."""
        meta = self.txns.get(self._by_producer.get(producer_id, ""))
        return meta is not None and meta.producer_epoch == epoch and meta.state == S.ONGOING and tp in meta.partitions

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                      transaction_version: int = 0) -> tuple[int, int]:
        """Log the decision and return the producer id and epoch the producer goes on with: for a
        transaction of transactions v2 ended by EndTxn v5 (`transaction_version` 2), the bumped
        epoch (or a new producer id once the epochs ran out)."""
        self._check_owner(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is not None and meta.bumps_epoch:
            return await self._end_bumping(transactional_id, meta, producer_id, epoch, commit, transaction_version)
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state == S.ONGOING:
            self._log(replace(meta, state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=_now_ms()))
            meta = self.txns[transactional_id]
            await self._replicated(transactional_id)
            self._complete_after_response(transactional_id)
            return meta.producer_id, meta.producer_epoch
        return self._end_again(transactional_id, meta, commit)

    def _end_again(self, transactional_id: str, meta: TxnMetadata, commit: bool) -> tuple[int, int]:
        """An EndTxn for a transaction already decided: a retry's answer, or why not."""
        wanted = "commit" if commit else "abort"
        done, doing = (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        if meta.state == doing:
            meta = self._complete(transactional_id)
        if meta.state == done:
            return meta.producer_id, meta.producer_epoch  # a retry of an EndTxn that succeeded
        if meta.state == doing:
            raise ConcurrentTransactions(f"the {wanted} of {transactional_id!r} is still writing its markers; retry")
        raise InvalidTxnState(f"cannot {wanted} {transactional_id!r}: it is in state {meta.state.kafka_name}"
                              + (" (no partition was added)" if meta.state == S.EMPTY else ""))

    async def _end_bumping(self, transactional_id: str, meta: TxnMetadata, producer_id: int, epoch: int,
                           commit: bool, transaction_version: int) -> tuple[int, int]:
        """EndTxn for a transaction of transactions v2 (Kafka's rules): the open transaction ends with
        the epoch bumped; a retry names the epoch before the bump (or, past a new producer id, the
        last epoch of the old one)."""
        retry_after_bump = meta.producer_id == producer_id and meta.producer_epoch == epoch + 1
        retry_after_new_id = (meta.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1
                              and meta.producer_epoch == 0)
        if meta.producer_id != producer_id and not retry_after_new_id:
            raise InvalidProducerIdMapping(f"producer id {producer_id} is not the one of transactional id "
                                           f"{transactional_id!r}; the producer must call InitProducerId first")
        valid = {S.ONGOING: meta.producer_epoch == epoch, S.EMPTY: meta.producer_epoch == epoch,
                 S.PREPARE_COMMIT: retry_after_bump, S.PREPARE_ABORT: retry_after_bump,
                 S.COMPLETE_COMMIT: retry_after_bump or retry_after_new_id,
                 S.COMPLETE_ABORT: retry_after_bump or retry_after_new_id}.get(meta.state, False)
        if not valid:
            raise self._fenced(meta, producer_id, epoch)
        if meta.state != S.ONGOING:
            return self._end_again(transactional_id, meta, commit)
        if transaction_version < 2:
            raise InvalidTxnState(f"the transaction of {transactional_id!r} runs transactions v2 (begun by a "
                                  f"produce request of v12 or later); end it with EndTxn v5 or later")
        exhausted = meta.producer_epoch >= MAX_EPOCH - 1
        self._log(replace(meta, state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_ms=_now_ms(),
                          producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch,
                          next_producer_id=self.producer_ids.next_id() if exhausted else -1))
        meta = self.txns[transactional_id]
        await self._replicated(transactional_id)
        self._complete_after_response(transactional_id)
        if meta.next_producer_id >= 0:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    def _abort_fenced(self, meta: TxnMetadata, reason: str, retried_by: int | None = None) -> None:
        """Abort an open transaction with a bumped epoch, so its producer can neither write nor commit
        (`retried_by`: the epoch of a producer that may ask again for the bumped one)."""
        log.info("aborting transaction of %s (producer %d epoch %d): %s", meta.transactional_id, meta.producer_id,
                 meta.producer_epoch, reason)
        bumped = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH - 1 else meta.producer_epoch
        self._log(replace(meta, producer_epoch=bumped, state=S.PREPARE_ABORT, last_update_ms=_now_ms(),
                          last_producer_epoch=NO_EPOCH if retried_by is None else retried_by))
        self._complete(meta.transactional_id)

    def _complete_after_response(self, transactional_id: str) -> None:
        """The server writes the EndTxn response in the event loop's next iteration; the markers go in
        the one after, so the producer's next round trips overlap them instead of waiting for them."""
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.call_soon, self._complete, transactional_id)

    def _complete(self, transactional_id: str) -> TxnMetadata:
        """Finish a logged decision: at once for a broker alone, where every partition is here and its
        markers need no other replica; in a cluster in the background (`_finish`). Returns the id's
        metadata, completed or still completing."""
        pending = self._pending.get(transactional_id)
        if pending is not None and pending.finishing is None:
            if self.led is None:
                self._complete_here(transactional_id, pending)
            else:
                pending.finishing = asyncio.create_task(self._finish(transactional_id, pending))
        return self.txns[transactional_id]

    def _complete_here(self, transactional_id: str, pending: _Pending) -> None:
        meta = pending.metadata
        pending.remaining -= self.markers.write_here_now(self._marker(transactional_id, meta), sorted(pending.remaining))
        if pending.remaining:
            log.warning("transaction %s: markers for %s not written yet; will retry", transactional_id,
                        sorted(pending.remaining))
            return
        try:
            self._log_completion(meta)
        except BrokerError as exc:
            log.error("transaction %s: cannot log its completion (%s); will retry", transactional_id, exc)

    def _log_completion(self, meta: TxnMetadata) -> None:
        commit = meta.state == S.PREPARE_COMMIT
        done = replace(meta, state=S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, partitions=frozenset(),
                       last_update_ms=_now_ms())
        if meta.next_producer_id >= 0:  # transactions v2 ran out of epochs: the producer goes on with the new id
            done = replace(done, producer_id=meta.next_producer_id, producer_epoch=0, next_producer_id=-1,
                           previous_producer_id=meta.producer_id, last_producer_epoch=NO_EPOCH)
        self._log(done)

    async def _finish(self, transactional_id: str, pending: _Pending) -> None:
        """Once the decision is in the ISR: write the markers still missing, then log the completion.
        Retries until done, unless the decision or this broker's coordination of the id ends first."""
        meta = pending.metadata
        commit = meta.state == S.PREPARE_COMMIT
        try:
            while self._pending.get(transactional_id) is pending and self.owns(transactional_id):
                try:
                    await self._replicated(transactional_id)
                    pending.remaining -= await self.markers.write(self._marker(transactional_id, meta),
                                                                  sorted(pending.remaining))
                    if not pending.remaining and self._pending.get(transactional_id) is pending:
                        self._log_completion(meta)
                        return
                except BrokerError as exc:
                    log.warning("transaction %s: cannot complete its %s yet: %s", transactional_id,
                                "commit" if commit else "abort", exc.message)
                if pending.remaining:
                    log.warning("transaction %s: markers for %s not written yet; will retry", transactional_id,
                                sorted(pending.remaining))
                await asyncio.sleep(MARKER_RETRY_S)
        finally:
            pending.finishing = None

    def _marker(self, transactional_id: str, meta: TxnMetadata) -> Marker:
        return Marker(meta.producer_id, meta.producer_epoch, self._coordinator_epoch(transactional_id),
                      meta.state == S.PREPARE_COMMIT, meta.transaction_version)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        try:
            return self.replicas.get(TRANSACTION_TOPIC, self.partition_of(transactional_id)).leader_epoch
        except BrokerError:
            return 0

    # -- operators -----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        self._check_owner(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == S.DEAD:
            raise TransactionalIdNotFound(f"no transactional id {transactional_id!r} is known to this coordinator")
        return meta

    def listed(self, states: set[TxnState] | None = None, producer_ids: set[int] | None = None,
               min_duration_ms: int = -1, pattern: str | None = None) -> list[TxnMetadata]:
        now = _now_ms()
        regex = re.compile(pattern) if pattern else None
        found = []
        for meta in self.txns.values():
            if meta.state == S.DEAD or (states and meta.state not in states):
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (meta.state != S.ONGOING or now - meta.start_ms < min_duration_ms):
                continue
            if regex and not regex.search(meta.transactional_id):
                continue
            found.append(meta)
        return sorted(found, key=lambda m: m.transactional_id)

    # -- timers --------------------------------------------------------------------------------

    async def _sweep_forever(self) -> None:
        interval = self.config.get("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep(_now_ms())
            except Exception:
                log.exception("transaction coordinator sweep failed")

    def sweep(self, now_ms: int) -> None:
        """Abort transactions past their timeout, retry unfinished markers, expire idle ids."""
        for txn_id in list(self._pending):
            self._complete(txn_id)
        for meta in list(self.txns.values()):
            if meta.state == S.ONGOING and now_ms - meta.start_ms > meta.timeout_ms:
                try:
                    self._abort_fenced(meta, f"it ran longer than its transaction.timeout.ms={meta.timeout_ms}")
                except BrokerError as exc:
                    log.error("cannot abort timed-out transaction %s: %s", meta.transactional_id, exc)
        expiration = self.config.get("transactional.id.expiration.ms")
        for meta in list(self.txns.values()):
            idle = meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            if idle and now_ms - meta.last_update_ms > expiration:
                tid = meta.transactional_id
                try:
                    self.topic.append(self.partition_of(tid), [(encode_key(tid), None)])
                    self.replay(tid, None)
                    log.info("transactional id %s expired after %d ms without use", tid, expiration)
                except BrokerError as exc:
                    log.error("cannot expire transactional id %s: %s", tid, exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
