"""Incremental fetch sessions (KIP-227): the broker remembers which partitions a client fetches, so
an incremental request names only partitions whose position changed and an incremental response
carries only partitions with news (records, an error, or a moved high watermark / log start).

Bookkeeping only, no I/O: the fetch handler gets a `FetchContext` for a request, reads the
partitions it lists, and passes the results to `FetchContext.respond`, which picks what the
response carries and records what the client now knows. Event loop only; no `await` between
`FetchSessionCache.context` and `respond` may let another request of the same session in (clients
send one fetch per session at a time; a second one fails the epoch check).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field

from .errors import FetchSessionIdNotFound, FetchSessionTopicIdError, InvalidFetchSessionEpoch

INVALID_SESSION_ID = 0  # "no session" in requests and responses
INITIAL_EPOCH = 0  # full request that asks for a new session
FINAL_EPOCH = -1  # full request that wants no session (closes the one named, if any)
MAX_SESSIONS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
EVICTION_S = 120.0  # Kafka's min.incremental.fetch.session.eviction.ms: idle time before a session may go

TopicKey = str | uuid.UUID  # topic name, or topic id from Fetch v13 on: whatever the wire names it by


@dataclass(slots=True)
class FetchPartition:
    """One partition a fetch reads. `high_watermark`, `log_start_offset` and `last_stable_offset`
    are what the session's client last heard; -1 until it heard anything, so it hears the next."""

    topic: TopicKey
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1

    @property
    def key(self) -> tuple[TopicKey, int]:
        return self.topic, self.partition


@dataclass(slots=True)
class FetchSession:
    id: int
    uses_topic_ids: bool
    partitions: dict[tuple[TopicKey, int], FetchPartition]  # insertion order is response order
    epoch: int = 1  # the epoch the next incremental request must carry
    last_used: float = field(default_factory=time.monotonic)


class FetchContext:
    """What one fetch request reads, and how its results become response partitions."""

    def __init__(self, cache: "FetchSessionCache", partitions: list[FetchPartition],
                 session: FetchSession | None = None, create_session: bool = False) -> None:
        self._cache = cache
        self.partitions = partitions
        self._session = session
        self._create = create_session
        self.session_id = session.id if session else INVALID_SESSION_ID

    @property
    def incremental(self) -> bool:
        return self._session is not None and not self._create

    def respond(self, results: dict[tuple[TopicKey, int], dict]) -> list[tuple[FetchPartition, dict]]:
        """(partition, result) pairs for the response, in order. A full response carries every
        partition; an incremental one only those with news. Remembers what the client was told."""
        if self._create:
            self._session = self._cache.create(self.partitions, self._uses_topic_ids())
            self.session_id = self._session.id if self._session else INVALID_SESSION_ID
        if self._session is None:
            return [(p, results[p.key]) for p in self.partitions]
        chosen = []
        for p in self.partitions:
            result = results[p.key]
            if _remember(p, result) or not self.incremental:
                chosen.append((p, result))
        if self.incremental:
            # Partitions that just returned records go to the back, so the others get the
            # response budget first next time (Kafka does the same for fairness).
            for p, result in chosen:
                if result.get("records"):
                    self._session.partitions[p.key] = self._session.partitions.pop(p.key)
        return chosen

    def _uses_topic_ids(self) -> bool:
        return any(isinstance(p.topic, uuid.UUID) for p in self.partitions)


def _remember(p: FetchPartition, result: dict) -> bool:
    """Update what the client knows of `p` from `result`; True if the client must hear about it."""
    news = bool(result.get("records")) or result["error_code"] != 0
    for name in ("high_watermark", "log_start_offset", "last_stable_offset"):
        if getattr(p, name) != result[name]:
            setattr(p, name, result[name])
            news = True
    if result["error_code"] != 0:
        p.high_watermark = -1  # so the partition is reported again once the error clears
    return news


class FetchSessionCache:
    """The broker's fetch sessions, by id. Full, it evicts the least recently used session if that
    one idled past EVICTION_S; otherwise a new client goes without a session (still served)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, eviction_s: float = EVICTION_S, clock=time.monotonic):
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self._max = max_sessions
        self._eviction_s = eviction_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def context(self, session_id: int, epoch: int, partitions: list[FetchPartition],
                forgotten: list[tuple[TopicKey, int]]) -> FetchContext:
        """The context for one request. Raises FetchSessionIdNotFound, InvalidFetchSessionEpoch or
        FetchSessionTopicIdError (whole-request errors) for an incremental request that does not fit."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return FetchContext(self, partitions, create_session=epoch == INITIAL_EPOCH and bool(partitions))
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionIdNotFound(
                f"fetch session {session_id} is unknown (evicted or never created); start a new one")
        if session.epoch != epoch:
            raise InvalidFetchSessionEpoch(
                f"fetch session {session_id} expects epoch {session.epoch}, got {epoch}; start a new session")
        if any(isinstance(p.topic, uuid.UUID) != session.uses_topic_ids for p in partitions):
            raise FetchSessionTopicIdError(
                f"fetch session {session_id} was created {'with' if session.uses_topic_ids else 'without'} "
                "topic ids; a request may not switch; start a new session")
        for p in partitions:
            known = session.partitions.get(p.key)
            if known is None:
                session.partitions[p.key] = p
            else:
                known.fetch_offset, known.max_bytes = p.fetch_offset, p.max_bytes
                known.current_leader_epoch = p.current_leader_epoch
        for key in forgotten:
            session.partitions.pop(key, None)
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        self._touch(session)
        return FetchContext(self, list(session.partitions.values()), session)

    def create(self, partitions: list[FetchPartition], uses_topic_ids: bool) -> FetchSession | None:
        now = self._clock()
        if len(self._sessions) >= self._max:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_used < self._eviction_s:
                return None
            del self._sessions[oldest.id]
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = random.randint(1, 2**31 - 1)
        session = FetchSession(session_id, uses_topic_ids, {p.key: p for p in partitions}, last_used=now)
        self._sessions[session_id] = session
        return session

    def _touch(self, session: FetchSession) -> None:
        session.last_used = self._clock()
        self._sessions[session.id] = self._sessions.pop(session.id)
