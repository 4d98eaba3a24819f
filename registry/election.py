"""One leader among the registry's instances, elected through a Kafka group as Confluent's are.

Every instance joins the group (`schema-registry` by default) with protocol type "sr" and its identity
as metadata (host, port, scheme, whether it may lead). The group's leader member assigns: the
eligible instance whose URL sorts first leads (the current leader stays while it is in the group),
and every member's assignment names it. Writes go to that leader; the others forward them (rest.py).

The identity and assignment are JSON shaped as Confluent's (`master_eligibility`, `master`,
`master_identity`), so the group reads the same to anyone who inspects it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka.client import AIOKafkaClient

from common.kafka_group import GroupMember, MembershipLost
from common.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)
PROTOCOL_TYPE = "sr"
PROTOCOL = "v0"
NO_ELIGIBLE_LEADER = 1


@dataclass(frozen=True)
class Identity:
    host: str
    port: int
    scheme: str = "http"
    eligible: bool = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def encode(self) -> dict:
        return {"version": 1, "host": self.host, "port": self.port, "master_eligibility": self.eligible,
                "scheme": self.scheme}

    @classmethod
    def decode(cls, body: dict) -> "Identity":
        return cls(body["host"], int(body["port"]), body.get("scheme", "http"), bool(body.get("master_eligibility")))


def assign(members: dict[str, Identity], current: Identity | None) -> tuple[str | None, Identity | None]:
    """(member id, identity) of the leader: the current one if it is still a member, else the eligible
    member whose URL sorts first; (None, None) when no member may lead."""
    eligible = {mid: identity for mid, identity in members.items() if identity.eligible}
    for mid, identity in eligible.items():
        if identity == current:
            return mid, identity
    if not eligible:
        return None, None
    mid = min(eligible, key=lambda m: (eligible[m].url, m))
    return mid, eligible[mid]


class Election:
    """The membership loop. `leader` is the elected identity (None while there is none); `on_elected` runs
    each time this instance becomes the leader, before it is announced as leading. Event loop only."""

    def __init__(self, bootstrap_servers: str, identity: Identity, group_id: str = "schema-registry", *,
                 on_elected: Callable[[], Awaitable[None]], security: KafkaSecurity = KafkaSecurity(),
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 3_000) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.identity = identity
        self.group_id = group_id
        self.on_elected = on_elected
        self.security = security
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.leader: Identity | None = None
        self.is_leader = False
        self._elected = asyncio.Event()
        self._client: AIOKafkaClient | None = None
        self._member: GroupMember | None = None
        self._loop: asyncio.Task | None = None

    async def start(self) -> None:
        self._client = AIOKafkaClient(bootstrap_servers=self.bootstrap_servers,
                                      request_timeout_ms=self.session_timeout_ms + 10_000, **self.security.aiokafka())
        await self._client.bootstrap()
        self._member = GroupMember(self._client, self.group_id, PROTOCOL_TYPE,
                                   session_timeout_ms=self.session_timeout_ms,
                                   rebalance_timeout_ms=self.session_timeout_ms)
        self._loop = asyncio.create_task(self._membership(), name="registry-election")

    async def wait_elected(self, timeout_s: float) -> Identity | None:
        """The leader, once one is elected (None if none is within `timeout_s`)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._elected.wait()
        except TimeoutError:
            pass
        return self.leader

    async def wait(self) -> None:
        await self._loop

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._member is not None:
            await self._member.leave()
        if self._client is not None:
            await self._client.close()

    async def _assign(self, metadata: dict[str, bytes]) -> dict[str, bytes]:
        members = {mid: Identity.decode(json.loads(raw)) for mid, raw in metadata.items()}
        leader_id, leader = assign(members, self.leader)
        assignment = json.dumps({"version": 1, "error": 0 if leader else NO_ELIGIBLE_LEADER, "master": leader_id,
                                 "master_identity": leader.encode() if leader else None}).encode()
        return {mid: assignment for mid in members}

    async def _membership(self) -> None:
        metadata = json.dumps(self.identity.encode()).encode()
        while True:
            raw = await self._member.join(PROTOCOL, metadata, self._assign)
            assignment = json.loads(raw)
            leader = Identity.decode(assignment["master_identity"]) if assignment.get("master_identity") else None
            leading = assignment.get("master") == self._member.member_id
            self.is_leader = False
            if leading:
                await self.on_elected()
            self.leader, self.is_leader = leader, leading
            self._elected.set()
            if leader is None:
                log.warning("group %s: no member may lead (all run with leader eligibility off); writes are refused",
                            self.group_id)
            else:
                log.info("group %s generation %d: leader %s%s", self.group_id, self._member.generation, leader.url,
                         " (this instance)" if leading else "")
            await self._heartbeat()

    async def _heartbeat(self) -> None:
        """Until the group rebalances or drops this member."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                if not await self._member.heartbeat():
                    return
            except MembershipLost as exc:
                log.warning("%s: this instance left the group; it stops writing until it has joined again", exc)
                self.is_leader = False
                return
