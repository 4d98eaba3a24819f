"""KIP-848's online migrations between the two protocols, as the records that make them: a live
classic group of consumers becoming a consumer group (upgrade), and a consumer group whose last
KIP-848 member left classic members behind becoming a classic group again (downgrade). Pure: the
consumer groups (consumer_groups.py) decide when, append these and replay them."""

from __future__ import annotations

import time
from typing import Callable

from ..protocol import consumer_group_records as records
from ..protocol.consumer_group_records import ConsumerGroupKey, MemberKey, i32
from ..protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment
from .assignors import Assignment
from .consumer_group import (ConsumerGroup, ConsumerMember, current_assignment_value, end_records,
                             member_metadata_value, removal_records, topic_partitions)
from .group import Group
from .offsets_codec import GroupKey, GroupValue, MemberValue

Named = dict[str, frozenset[int]]  # topic name → partitions


def upgrade_records(classic: Group, topic_ids: Callable[[Named], Assignment]) -> list:
    """The classic group at its generation as a consumer group: each member a member at that epoch with
    the partitions it has (also its target), speaking the classic protocol still; the classic group's
    metadata tombstoned (its offsets stay). ValueError when a member's subscription or assignment
    cannot be read."""
    epoch, group_id = classic.generation, classic.group_id
    out: list = [(GroupKey(group_id), None)]
    for m in classic.members.values():
        try:
            topics = decode_subscription(m.metadata(classic.protocol)).topics
            assigned = topic_ids(decode_assignment(m.assignment))
        except ValueError as exc:
            raise ValueError(f"member {m.member_id}'s subscription or assignment cannot be read ({exc})") from None
        member = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(topics)), rebalance_timeout_ms=m.rebalance_timeout_ms,
            member_epoch=epoch, previous_member_epoch=epoch, assigned=assigned,
            classic_session_timeout_ms=m.session_timeout_ms, classic_protocols=tuple(m.protocols))
        out += [(MemberKey(records.MEMBER_METADATA, group_id, m.member_id), member_metadata_value(member)),
                (MemberKey(records.TARGET_MEMBER, group_id, m.member_id),
                 records.TargetAssignmentMemberValue(topic_partitions=topic_partitions(assigned))),
                (MemberKey(records.CURRENT_ASSIGNMENT, group_id, m.member_id), current_assignment_value(member))]
    return out + [(ConsumerGroupKey(records.GROUP_EPOCH, group_id), records.GroupMetadataValue(epoch=i32(epoch))),
                  (ConsumerGroupKey(records.TARGET_METADATA, group_id),
                   records.TargetAssignmentMetadataValue(assignment_epoch=i32(epoch)))]


def downgrade_records(group: ConsumerGroup, leaving: str,
                      topic_names: Callable[[Assignment], Named]) -> tuple[list, int] | None:
    """(records, generation) turning `group` into a classic group as its member `leaving` goes, when that
    is its last KIP-848 member and classic members remain: each with the partitions it has and the
    protocol they all support (the first member's preference first); the consumer group's records
    tombstoned. None when that is not the case."""
    rest = [m for m_id, m in group.members.items() if m_id != leaving]
    if not rest or group.members[leaving].classic or not all(m.classic for m in rest):
        return None
    supported = set.intersection(*({name for name, _ in m.classic_protocols} for m in rest))
    protocol = next((name for name, _ in rest[0].classic_protocols if name in supported), None)
    if protocol is None:
        return None
    epoch, group_id = group.group_epoch + 1, group.group_id
    out: list = [record for m_id in group.members for record in removal_records(group_id, m_id)]
    out += end_records(group)
    members = tuple(MemberValue(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                m.classic_session_timeout_ms, dict(m.classic_protocols)[protocol],
                                encode_assignment(topic_names(m.assigned))) for m in rest)
    out.append((GroupKey(group_id), GroupValue("consumer", epoch, protocol, rest[0].member_id,
                                               int(time.time() * 1000), members)))
    return out, epoch
