"""Membership of a Kafka group with any protocol type (Kafka Connect's workers use "connect", the schema
registry's instances "sr").

The broker's group coordinator does the same for workers as for consumers: JoinGroup collects every
member's metadata and elects a leader, the leader's SyncGroup hands each member its assignment, and
Heartbeat tells a member when the group rebalances. What the metadata and assignments mean is the
caller's business (Kafka Connect's workers: `connect.assignor`; the schema registry's instances:
`registry.election`); this module only speaks the protocol, over aiokafka's client
and request classes, and turns the coordinator's errors into three outcomes: an assignment, "rejoin",
or an error a user must act on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka import errors
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

log = logging.getLogger(__name__)

Assign = Callable[[dict[str, bytes]], Awaitable[dict[str, bytes]]]
"""The leader's job: every member's metadata in, every member's assignment out."""

# The coordinator moved or is loading: find it again and retry.
_COORDINATOR_MOVED = (errors.CoordinatorNotAvailableError, errors.NotCoordinatorError,
                      errors.CoordinatorLoadInProgressError, errors.KafkaConnectionError,
                      errors.NodeNotReadyError, errors.RequestTimedOutError)
# This member's generation is over: join again (keeping the member id unless the coordinator forgot it).
_REJOIN = (errors.RebalanceInProgressError, errors.IllegalGenerationError, errors.UnknownMemberIdError)


class MembershipLost(Exception):
    """The coordinator no longer knows this member (its session expired): whatever it ran may already
    run elsewhere, so the caller stops everything before it joins again."""


class GroupMember:
    """One member of `group_id`. Event loop only; `join` and `heartbeat` are never called concurrently."""

    def __init__(self, client: AIOKafkaClient, group_id: str, protocol_type: str, *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, retry_backoff_ms: int = 200) -> None:
        self.client = client
        self.group_id = group_id
        self.protocol_type = protocol_type
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.backoff = retry_backoff_ms / 1000
        self.member_id = JoinGroupRequest.UNKNOWN_MEMBER_ID
        self.generation = -1
        self.leader_id: str | None = None
        self._coordinator: int | None = None

    @property
    def is_leader(self) -> bool:
        return self.generation >= 0 and self.leader_id == self.member_id

    async def join(self, protocol: str, metadata: bytes, assign: Assign) -> bytes:
        """Join (or rejoin) the group and return this member's assignment for the new generation."""
        while True:
            try:
                return await self._join_and_sync(protocol, metadata, assign)
            except errors.MemberIdRequired:
                continue  # the coordinator gave us a member id (KIP-394): join again with it
            except _REJOIN as exc:
                if isinstance(exc, errors.UnknownMemberIdError):
                    self.member_id = JoinGroupRequest.UNKNOWN_MEMBER_ID
                log.info("group %s: %s while joining; joining again", self.group_id, type(exc).__name__)
            except _COORDINATOR_MOVED as exc:
                log.info("group %s: coordinator unavailable (%s); looking it up again", self.group_id,
                         type(exc).__name__)
                self._coordinator = None
                await asyncio.sleep(self.backoff)
            except errors.InvalidSessionTimeoutError:
                raise errors.InvalidSessionTimeoutError(
                    f"the broker refuses session.timeout.ms={self.session_timeout_ms}: it must lie within the "
                    "broker's group.min.session.timeout.ms and group.max.session.timeout.ms") from None
            except errors.InconsistentGroupProtocolError:
                raise errors.InconsistentGroupProtocolError(
                    f"group {self.group_id} is in use by members of another kind (not {self.protocol_type!r} "
                    f"members with protocol {protocol!r}); give these members a group id of their own") from None
            except errors.KafkaError as exc:
                if not exc.retriable:
                    raise
                log.info("group %s: %s while joining; retrying", self.group_id, type(exc).__name__)
                await asyncio.sleep(self.backoff)

    async def _join_and_sync(self, protocol: str, metadata: bytes, assign: Assign) -> bytes:
        join = await self._send(JoinGroupRequest(
            self.group_id, self.session_timeout_ms, self.rebalance_timeout_ms, self.member_id, None,
            self.protocol_type, [(protocol, metadata)]))
        if join.error_code == errors.MemberIdRequired.errno:
            self.member_id = join.member_id
        _raise_for(join.error_code)
        self.member_id, self.generation, self.leader_id = join.member_id, join.generation_id, join.leader_id
        assignments: dict[str, bytes] = {}
        if self.is_leader:
            assignments = await assign({m[0]: m[-1] for m in join.members})
        sync = await self._send(SyncGroupRequest(self.group_id, self.generation, self.member_id, None,
                                                 list(assignments.items())))
        _raise_for(sync.error_code)
        return sync.member_assignment

    async def heartbeat(self) -> bool:
        """False when the group is rebalancing and this member must join again; raises `MembershipLost`
        when the coordinator dropped this member."""
        try:
            response = await self._send(HeartbeatRequest(self.group_id, self.generation, self.member_id))
            _raise_for(response.error_code)
        except errors.RebalanceInProgressError:
            return False
        except (errors.IllegalGenerationError, errors.UnknownMemberIdError) as exc:
            self.generation = -1
            if isinstance(exc, errors.UnknownMemberIdError):
                self.member_id = JoinGroupRequest.UNKNOWN_MEMBER_ID
            raise MembershipLost(f"group {self.group_id}: {type(exc).__name__}") from None
        except errors.KafkaError as exc:  # unreachable for longer than the session: the coordinator drops us
            log.info("group %s: heartbeat failed (%s); looking the coordinator up again", self.group_id,
                     type(exc).__name__)
            self._coordinator = None
        return True

    async def leave(self) -> None:
        """Leave at once, so the others take over now rather than after session.timeout.ms. Best effort."""
        if self.generation < 0:
            return
        try:
            await self._send(LeaveGroupRequest(self.group_id, self.member_id))
        except errors.KafkaError as exc:
            log.warning("group %s: LeaveGroup failed (%s); the coordinator will expire this member", self.group_id,
                        exc)
        self.generation = -1

    async def _send(self, request):
        if self._coordinator is None:
            self._coordinator = await self.client.coordinator_lookup(0, self.group_id)
        return await self.client.send(self._coordinator, request, group=ConnectionGroup.COORDINATION)


def _raise_for(code: int) -> None:
    if code:
        raise errors.for_code(code)()
