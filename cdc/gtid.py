"""MySQL GTID sets, tagged GTIDs (MySQL 8.3+) included: parsed, unioned, printed as the server
prints them, and encoded as a replica sends them in COM_BINLOG_DUMP_GTID.

A GTID is `uuid:n`, or `uuid:tag:n` for a tagged one (`SET gtid_next='AUTOMATIC:tag'`); a tag is a
letter or `_`, then up to 31 letters, digits or `_`, case-insensitive (the server lowercases it).
Text: `uuid:1-5:7:tag_a:1-2,uuid2:...` — after the uuid, intervals of untagged GTIDs, then each tag
followed by its intervals. The server sorts by uuid, then tag (untagged first), merges adjacent
intervals, and separates uuids with ",\n"; `str()` gives the same text with "," only, as offsets
store it.

Binary (sql/rpl_gtid_set.cc Gtid_set::encode), little-endian: a u64 count of (uuid, tag) entries,
then per entry the 16 uuid bytes, the tag, a u64 interval count and per interval a u64 start and a
u64 end (exclusive). Untagged sets use the classic format every server reads: the count is the
whole u64 and there is no tag field. A set with a tag uses the tagged format: the u64 holds the
format (1) in its lowest and highest byte and the count in the six between, and every entry has its
tag as a string of MySQL's serialization framework (empty for untagged GTIDs).
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from uuid import UUID

from cdc.mysql_serialization import encode_unsigned

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_TAG = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
_INTERVAL = r"[0-9]+(?:-[0-9]+)?"
_UUID_SET = re.compile(rf"\s*({_UUID})((?:\s*:\s*(?:{_TAG}|{_INTERVAL}))*)\s*")
_GTID = re.compile(rf"({_UUID}):(?:({_TAG}):)?([0-9]+)")
_MAX_GNO = (1 << 63) - 2        # the server's GNO_END is 2^63 - 1, exclusive
_TAGGED_FORMAT = 1


def _interval(first: int, last: int, text: str) -> tuple[int, int]:
    if not 1 <= first <= _MAX_GNO or last > _MAX_GNO:
        raise ValueError(f"not a MySQL GTID set: {text!r} holds the interval {first}-{last}; transaction "
                         f"numbers run from 1 to {_MAX_GNO}")
    return first, last


class MySqlGtidSet:
    """A set of MySQL GTIDs. Mutated only through `add`, by one owner."""

    def __init__(self, text: str = "") -> None:
        # (uuid, tag) -> sorted, disjoint, non-adjacent closed intervals [first, last]
        self._intervals: dict[tuple[str, str], list[list[int]]] = {}
        for part in text.split(","):
            if part.strip():
                self._add_uuid_set(part, text)

    def _add_uuid_set(self, part: str, text: str) -> None:
        match = _UUID_SET.fullmatch(part)
        if match is None:
            raise ValueError(f"not a MySQL GTID set: {text!r} (at {part.strip()!r}); expected "
                             "uuid:1-5:tag:1-2,uuid:... as @@gtid_executed prints it")
        uuid, tag = match.group(1).lower(), ""
        for item in filter(None, (i.strip() for i in match.group(2).split(":"))):
            if not item[0].isdigit():
                tag = item.lower()
                continue
            first, _, last = item.partition("-")
            first, last = _interval(int(first), int(last or first), text)
            if first <= last:               # the server reads a downward interval as no GTIDs
                self._add_interval(uuid, tag, first, last)

    def _add_interval(self, uuid: str, tag: str, first: int, last: int) -> None:
        intervals = self._intervals.setdefault((uuid, tag), [])
        if not intervals or intervals[-1][1] + 1 < first:      # the common case: past the end
            intervals.append([first, last])
            return
        i = bisect_left(intervals, first, key=lambda iv: iv[1] + 1)   # first interval touching or after
        j = i
        while j < len(intervals) and intervals[j][0] <= last + 1:
            j += 1
        if i < j:
            first, last = min(first, intervals[i][0]), max(last, intervals[j - 1][1])
        intervals[i:j] = [[first, last]]

    def add(self, gtid: str) -> None:
        """Add one GTID, `uuid:n` or `uuid:tag:n`."""
        match = _GTID.fullmatch(gtid)
        if match is None:
            raise ValueError(f"not a MySQL GTID: {gtid!r}; expected uuid:n or uuid:tag:n")
        n = int(match.group(3))
        self._add_interval(match.group(1).lower(), (match.group(2) or "").lower(), *_interval(n, n, gtid))

    def union(self, other: MySqlGtidSet) -> MySqlGtidSet:
        result = MySqlGtidSet()
        for gtids in (self, other):
            for (uuid, tag), intervals in gtids._intervals.items():
                for first, last in intervals:
                    result._add_interval(uuid, tag, first, last)
        return result

    def subtract(self, other: MySqlGtidSet) -> MySqlGtidSet:
        """The GTIDs of this set that `other` lacks (the server's GTID_SUBTRACT)."""
        result = MySqlGtidSet()
        for key, intervals in self._intervals.items():
            theirs = other._intervals.get(key, [])
            for first, last in intervals:
                for a, b in theirs:
                    if b < first or a > last:
                        continue
                    if a > first:
                        result._add_interval(*key, first, a - 1)
                    first = b + 1
                    if first > last:
                        break
                if first <= last:
                    result._add_interval(*key, first, last)
        return result

    def _entries(self) -> list[tuple[tuple[str, str], list[list[int]]]]:
        """In the server's order: by uuid (its bytes sort as its lowercase text does), then tag."""
        return sorted(self._intervals.items())

    def __bool__(self) -> bool:
        return bool(self._intervals)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MySqlGtidSet) and self._intervals == other._intervals

    def __str__(self) -> str:
        parts: list[str] = []
        previous = None
        for (uuid, tag), intervals in self._entries():
            text = ":".join(f"{a}" if a == b else f"{a}-{b}" for a, b in intervals)
            if tag:
                text = f"{tag}:{text}"
            if uuid == previous:
                parts[-1] += f":{text}"
            else:
                parts.append(f"{uuid}:{text}")
                previous = uuid
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"MySqlGtidSet({str(self)!r})"

    def encode(self) -> bytes:
        """The set as COM_BINLOG_DUMP_GTID carries it: the classic format without tags, else the tagged one."""
        entries = self._entries()
        tagged = any(tag for (_, tag), _ in entries)
        count = len(entries)
        out = [struct.pack("<Q", (_TAGGED_FORMAT << 56) | (count << 8) | _TAGGED_FORMAT if tagged else count)]
        for (uuid, tag), intervals in entries:
            out.append(UUID(uuid).bytes)
            if tagged:
                out.append(encode_unsigned(len(tag)) + tag.encode("ascii"))
            out.append(struct.pack("<Q", len(intervals)))
            out.extend(struct.pack("<QQ", first, last + 1) for first, last in intervals)
        return b"".join(out)
