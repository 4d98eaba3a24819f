"""Broker errors that carry their wire code. Raise them anywhere below a handler; the handler (or
the dispatcher, for whole-request failures) turns them into that partition's / request's code."""

from __future__ import annotations

from .codec import ErrorCode


class BrokerError(Exception):
    code: ErrorCode = ErrorCode.unknown_server_error
    retriable = False

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


def _error(name: str, code: ErrorCode, retriable: bool = False) -> type[BrokerError]:
    return type(name, (BrokerError,), {"code": code, "retriable": retriable, "__module__": __name__})


UnknownTopicOrPartition = _error("UnknownTopicOrPartition", ErrorCode.unknown_topic_or_partition, True)
UnknownTopicId = _error("UnknownTopicId", ErrorCode.unknown_topic_id, True)
TopicAlreadyExists = _error("TopicAlreadyExists", ErrorCode.topic_already_exists)
InvalidTopic = _error("InvalidTopic", ErrorCode.invalid_topic_exception)
InvalidPartitions = _error("InvalidPartitions", ErrorCode.invalid_partitions)
InvalidReplicationFactor = _error("InvalidReplicationFactor", ErrorCode.invalid_replication_factor)
InvalidConfig = _error("InvalidConfig", ErrorCode.invalid_config)
InvalidRequest = _error("InvalidRequest", ErrorCode.invalid_request)
CorruptRecord = _error("CorruptRecord", ErrorCode.corrupt_message)
InvalidRecord = _error("InvalidRecord", ErrorCode.invalid_record)
RecordTooLarge = _error("RecordTooLarge", ErrorCode.message_too_large)
OffsetOutOfRange = _error("OffsetOutOfRange", ErrorCode.offset_out_of_range)
PolicyViolation = _error("PolicyViolation", ErrorCode.policy_violation)
StorageError = _error("StorageError", ErrorCode.kafka_storage_error, True)
UnsupportedCompression = _error("UnsupportedCompression", ErrorCode.unsupported_compression_type)
InvalidTimestamp = _error("InvalidTimestamp", ErrorCode.invalid_timestamp)
InvalidRequiredAcks = _error("InvalidRequiredAcks", ErrorCode.invalid_required_acks)
FencedLeaderEpoch = _error("FencedLeaderEpoch", ErrorCode.fenced_leader_epoch, True)
UnknownLeaderEpoch = _error("UnknownLeaderEpoch", ErrorCode.unknown_leader_epoch, True)
NotLeaderOrFollower = _error("NotLeaderOrFollower", ErrorCode.not_leader_or_follower, True)
NotEnoughReplicas = _error("NotEnoughReplicas", ErrorCode.not_enough_replicas, True)
NotEnoughReplicasAfterAppend = _error("NotEnoughReplicasAfterAppend", ErrorCode.not_enough_replicas_after_append,
                                      True)
RequestTimedOut = _error("RequestTimedOut", ErrorCode.request_timed_out, True)
UnsupportedVersion = _error("UnsupportedVersion", ErrorCode.unsupported_version)
FetchSessionIdNotFound = _error("FetchSessionIdNotFound", ErrorCode.fetch_session_id_not_found, True)
InvalidFetchSessionEpoch = _error("InvalidFetchSessionEpoch", ErrorCode.invalid_fetch_session_epoch, True)
FetchSessionTopicIdError = _error("FetchSessionTopicIdError", ErrorCode.fetch_session_topic_id_error, True)
InvalidReplicaAssignment = _error("InvalidReplicaAssignment", ErrorCode.invalid_replica_assignment)
TopicDeletionDisabled = _error("TopicDeletionDisabled", ErrorCode.topic_deletion_disabled)
# Authorization (ACLs)
TopicAuthorizationFailed = _error("TopicAuthorizationFailed", ErrorCode.topic_authorization_failed)
GroupAuthorizationFailed = _error("GroupAuthorizationFailed", ErrorCode.group_authorization_failed)
ClusterAuthorizationFailed = _error("ClusterAuthorizationFailed", ErrorCode.cluster_authorization_failed)
TransactionalIdAuthorizationFailed = _error("TransactionalIdAuthorizationFailed",
                                            ErrorCode.transactional_id_authorization_failed)
SecurityDisabled = _error("SecurityDisabled", ErrorCode.security_disabled)
# Idempotent and transactional producers
UnknownProducerId = _error("UnknownProducerId", ErrorCode.unknown_producer_id)
OutOfOrderSequence = _error("OutOfOrderSequence", ErrorCode.out_of_order_sequence_number)
InvalidProducerEpoch = _error("InvalidProducerEpoch", ErrorCode.invalid_producer_epoch)
ProducerFenced = _error("ProducerFenced", ErrorCode.producer_fenced)
InvalidProducerIdMapping = _error("InvalidProducerIdMapping", ErrorCode.invalid_producer_id_mapping)
InvalidTxnState = _error("InvalidTxnState", ErrorCode.invalid_txn_state)
InvalidTransactionTimeout = _error("InvalidTransactionTimeout", ErrorCode.invalid_transaction_timeout)
ConcurrentTransactions = _error("ConcurrentTransactions", ErrorCode.concurrent_transactions, True)
TransactionCoordinatorFenced = _error("TransactionCoordinatorFenced", ErrorCode.transaction_coordinator_fenced)
TransactionalIdNotFound = _error("TransactionalIdNotFound", ErrorCode.transactional_id_not_found)
CoordinatorNotAvailable = _error("CoordinatorNotAvailable", ErrorCode.coordinator_not_available, True)
CoordinatorLoadInProgress = _error("CoordinatorLoadInProgress", ErrorCode.coordinator_load_in_progress, True)
NotCoordinator = _error("NotCoordinator", ErrorCode.not_coordinator, True)
NotController = _error("NotController", ErrorCode.not_controller, True)
NoReassignmentInProgress = _error("NoReassignmentInProgress", ErrorCode.no_reassignment_in_progress)
ElectionNotNeeded = _error("ElectionNotNeeded", ErrorCode.election_not_needed)
PreferredLeaderNotAvailable = _error("PreferredLeaderNotAvailable", ErrorCode.preferred_leader_not_available, True)
EligibleLeadersNotAvailable = _error("EligibleLeadersNotAvailable", ErrorCode.eligible_leaders_not_available, True)
# Consumer groups (KIP-848)
GroupIdNotFound = _error("GroupIdNotFound", ErrorCode.group_id_not_found)
UnknownMemberId = _error("UnknownMemberId", ErrorCode.unknown_member_id)
FencedMemberEpoch = _error("FencedMemberEpoch", ErrorCode.fenced_member_epoch)
StaleMemberEpoch = _error("StaleMemberEpoch", ErrorCode.stale_member_epoch)
FencedInstanceId = _error("FencedInstanceId", ErrorCode.fenced_instance_id)
UnreleasedInstanceId = _error("UnreleasedInstanceId", ErrorCode.unreleased_instance_id)
UnsupportedAssignor = _error("UnsupportedAssignor", ErrorCode.unsupported_assignor)
InvalidRegularExpression = _error("InvalidRegularExpression", ErrorCode.invalid_regular_expression)
GroupMaxSizeReached = _error("GroupMaxSizeReached", ErrorCode.group_max_size_reached)
NonEmptyGroup = _error("NonEmptyGroup", ErrorCode.non_empty_group)
# Share groups (KIP-932)
InvalidRecordState = _error("InvalidRecordState", ErrorCode.invalid_record_state)
ShareSessionNotFound = _error("ShareSessionNotFound", ErrorCode.share_session_not_found, True)
InvalidShareSessionEpoch = _error("InvalidShareSessionEpoch", ErrorCode.invalid_share_session_epoch, True)
FencedStateEpoch = _error("FencedStateEpoch", ErrorCode.fenced_state_epoch)
