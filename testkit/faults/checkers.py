"""Checkers for Jepsen's anomaly classes over a recorded history (pure functions, no I/O).

Each returns {anomaly class: [what was seen, one line each]}; a class with no entry did not occur.
Queue (Jepsen's Kafka workload): lost, duplicated, inconsistent-offsets, nonmonotonic-poll,
unseen. Transactions: aborted-read, torn-transaction, uncommitted-read, duplicated, lost.
Acknowledgements against where the data was: held-by-too-few (an acknowledged write that, at a
snapshot of every broker's disk taken after the ack, fewer than min.insync.replicas brokers held).
Replicas: diverged (two in-sync replicas differ where both have records).
"""

from __future__ import annotations

from collections import defaultdict

from .logs import Entry
from .workloads import Poll, Send, Txn

Final = dict[int, list[tuple[int, bytes]]]  # partition -> [(offset, value)] read at the end
Writers = dict[tuple[int, int], str]  # (partition, offset) -> "producer P epoch E seq S", from a replica


def writers(replicas: dict[int, list[Entry]]) -> Writers:
    """partition -> one replica's entries: who wrote each offset (to tell a client's resend under a
    new producer epoch from a batch the broker took twice)."""
    return {(p, e.offset): f"producer {e.producer_id} epoch {e.producer_epoch} seq {e.sequence}"
            for p, entries in replicas.items() for e in entries}


def _where(final: Final) -> dict[bytes, list[tuple[int, int]]]:
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in final.items():
        for offset, value in records:
            where[value].append((partition, offset))
    return where


def _common(polls: list[Poll], final: Final, writers: Writers | None = None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for value, places in _where(final).items():
        if len(places) > 1:
            by = f", written by {[writers.get(place) for place in places]}" if writers else ""
            found["duplicated"].append(f"{value!r} at {places}{by}")
    final_at = {(p, o): v for p, records in final.items() for o, v in records}
    polled_at: dict[tuple[int, int], bytes] = {}
    last: dict[tuple[int, int], int] = {}
    for poll in polls:
        key = (poll.partition, poll.offset)
        if polled_at.setdefault(key, poll.value) != poll.value:
            found["inconsistent-offsets"].append(f"{key} polled as {polled_at[key]!r} and {poll.value!r}")
        if key in final_at and final_at[key] != poll.value:
            found["inconsistent-offsets"].append(f"{key} polled as {poll.value!r}, finally {final_at[key]!r}")
        stream = (poll.session, poll.partition)
        if stream in last and poll.offset <= last[stream]:
            found["nonmonotonic-poll"].append(f"partition {poll.partition}: offset {poll.offset} after {last[stream]}")
        last[stream] = poll.offset
    return found


def check_queue(sends: list[Send], polls: list[Poll], final: Final,
                writers: Writers | None = None) -> dict[str, list[str]]:
    found = _common(polls, final, writers)
    where = _where(final)
    polled = {poll.value for poll in polls}
    for send in sends:
        if send.acked is None:
            continue
        places = where.get(send.value, [])
        if not places:
            found["lost"].append(f"{send.value!r} acknowledged at {send.partition}/{send.offset}, not in the log")
        elif send.offset is not None and (send.partition, send.offset) not in places:
            # (librdkafka acknowledges some retried batches with no offset: nothing to compare then)
            found["inconsistent-offsets"].append(f"{send.value!r} acknowledged at {send.partition}/{send.offset}, "
                                                 f"in the log at {places}")
        if send.value not in polled:
            found["unseen"].append(f"{send.value!r} acknowledged, never polled")
    return dict(found)


def check_txns(txns: list[Txn], polls: list[Poll], final: Final) -> dict[str, list[str]]:
    found = _common(polls, final)
    where = _where(final)
    txn_of = {value: txn for txn in txns for value in txn.values}
    for poll in polls:
        txn = txn_of.get(poll.value)
        if txn is None:
            found["unknown-value"].append(f"{poll.value!r} polled, never written")
        elif txn.outcome == "aborted":
            found["aborted-read"].append(f"{poll.value!r} of aborted transaction {txn.id} polled")
        elif txn.commit_invoked is None or poll.at < txn.commit_invoked:
            found["uncommitted-read"].append(f"{poll.value!r} of transaction {txn.id} polled before its commit")
    for txn in txns:
        present = [v for v in txn.values if v in where]
        if txn.outcome == "aborted" and present:
            found["aborted-read"].append(f"transaction {txn.id} aborted, {len(present)} value(s) read at the end")
        elif txn.outcome == "committed" and not present:
            found["lost"].append(f"transaction {txn.id} committed, none of its values read at the end")
        elif txn.outcome in ("committed", "indeterminate") and 0 < len(present) < len(txn.values):
            found["torn-transaction"].append(f"transaction {txn.id} ({txn.outcome}): {len(present)} of "
                                             f"{len(txn.values)} values read at the end")
    return dict(found)


def check_acks(sends: list[Send], snapshots: list[tuple[str, float, dict[int, set[bytes]]]],
               min_isr: int) -> dict[str, list[str]]:
    """`snapshots`: (label, taken at, broker -> values on its disk). Every value acknowledged before a
    snapshot was taken must be on at least `min_isr` brokers in it."""
    found: dict[str, list[str]] = defaultdict(list)
    for label, taken, disks in snapshots:
        for send in sends:
            if send.acked is not None and send.acked < taken:
                holders = sorted(b for b, values in disks.items() if send.value in values)
                if len(holders) < min_isr:
                    found["held-by-too-few"].append(
                        f"{send.value!r} acknowledged at {send.partition}/{send.offset} "
                        f"{taken - send.acked:.1f} s before {label}: on broker(s) {holders} only")
    return dict(found)


def check_replicas(replicas: dict[int, list[Entry]]) -> dict[str, list[str]]:
    """Replicas of one partition once the cluster is quiet and whole: identical records."""
    found: dict[str, list[str]] = defaultdict(list)
    as_lists = {b: [(e.offset, e.value, e.control) for e in entries] for b, entries in replicas.items()}
    brokers = sorted(as_lists)
    for other in brokers[1:]:
        a, b = as_lists[brokers[0]], as_lists[other]
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            found["diverged"].append(f"brokers {brokers[0]} and {other} differ from record {first} "
                                     f"({len(a)} and {len(b)} records)")
    return dict(found)
