"""Share sessions (KIP-932): which partitions a share consumer fetches from this broker, kept between
its ShareFetch requests so each names only what changed (as KIP-227's fetch sessions do for Fetch).

A session belongs to one member of one group. Its epoch says where the member is:

    0      open a session (a new one replaces the member's old one); it names every partition
    -1     close it, after the acknowledgements the request carries; nothing is fetched
    n > 0  the session's next epoch, else INVALID_SHARE_SESSION_EPOCH; it adds the request's
           partitions and drops its forgotten ones. ShareAcknowledge moves the epoch too.

Event loop only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable

from ..protocol.errors import InvalidRequest, InvalidShareSessionEpoch, ShareSessionNotFound

OPEN_EPOCH, CLOSE_EPOCH = 0, -1
TopicPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # (ordered, as the client added them)
    fetches: int = 0

    def fetch_order(self) -> list[TopicPartition]:
        """The partitions, starting one further at each fetch: when max_records cuts a fetch short, the
        partitions at the end of the list get their turn first the next time."""
        order = list(self.partitions)
        self.fetches += 1
        if not order:
            return order
        start = self.fetches % len(order)
        return order[start:] + order[:start]


class ShareSessions:
    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def update(self, group_id: str, member_id: str, epoch: int, added: Iterable[TopicPartition] = (),
               forgotten: Iterable[TopicPartition] = (), acknowledging: bool = False) -> ShareSession | None:
        """The session after this request (None once closed). Raises the session errors."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            if acknowledging:
                raise InvalidRequest("a request opening a share session (epoch 0) cannot acknowledge records")
            session = self.sessions[key] = ShareSession(group_id, member_id)
            session.partitions.update(dict.fromkeys(added))
            return session
        session = self.sessions.get(key)
        if session is None:
            raise ShareSessionNotFound(f"member {member_id} of share group {group_id!r} has no share session on this "
                                       f"broker; open one with epoch 0")
        if epoch == CLOSE_EPOCH:
            del self.sessions[key]
            return None
        if epoch != session.next_epoch:
            raise InvalidShareSessionEpoch(f"share session epoch {epoch}, expected {session.next_epoch}")
        session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        session.partitions.update(dict.fromkeys(added))
        for tp in forgotten:
            session.partitions.pop(tp, None)
        return session

    def serves(self, group_id: str) -> bool:
        """Whether any member of the group has a session here."""
        return any(k[0] == group_id for k in self.sessions)

    def drop_member(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)

    def drop_group(self, group_id: str) -> None:
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]
