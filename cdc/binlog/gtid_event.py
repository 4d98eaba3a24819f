"""GTID_TAGGED_LOG_EVENT (type 42, MySQL 8.3+): the event that opens a group whose GTID has a tag.

Where GTID_LOG_EVENT (33) has fixed fields, this one is a message of MySQL's serialization framework
(cdc.mysql_serialization; the fields of libs/mysql/binlog/event/control_events.h Gtid_event::
define_fields): a format version (1), the message size, the id of the last field a reader must
understand, then `field id, value` pairs in id order. Fields 0-3, always written, name the GTID:

    0 flags (unsigned)   1 uuid (16 unsigned, one per byte)   2 gno (signed)   3 tag (string)

Fields 4-11 (logical clock, commit timestamps, transaction length, server versions, commit group
ticket) are not needed: the streaming source takes only the GTID from a group's first event, as it
does from GTID_LOG_EVENT. The message's size bounds it, so they are left unread; a message that
declares a field newer than these as one its readers must understand is refused.
"""

from __future__ import annotations

from uuid import UUID

from cdc.errors import DecodeError
from cdc.mysql_serialization import Reader

_WHAT = "GTID_TAGGED_LOG_EVENT"
_FORMAT_VERSION = 1
_FIELDS_KNOWN = 12          # ids 0-11 in MySQL 8.3 to 9.x
_UUID_BYTES = 16


def tagged_gtid(body: bytes) -> str:
    """The GTID, `uuid:tag:gno`, of a GTID_TAGGED_LOG_EVENT's body (the bytes after its 19-byte header;
    a checksum after the message is ignored)."""
    r = Reader(body, _WHAT)
    version, size, last_required = r.unsigned(), r.unsigned(), r.unsigned()
    if version != _FORMAT_VERSION:
        raise DecodeError(f"{_WHAT} in serialization format {version}; binlake reads format {_FORMAT_VERSION} "
                          "(MySQL 8.3 to 9.x): upgrade binlake to read this server's binlog")
    if size > len(body):
        raise DecodeError(f"{_WHAT} declares {size} bytes but has {len(body)}")
    if last_required > _FIELDS_KNOWN:
        raise DecodeError(f"{_WHAT} carries field {last_required - 1}, which readers must understand and binlake "
                          "does not know: upgrade binlake to read this server's binlog")
    r.limit(size)
    _field(r, 0, "flags")
    r.unsigned()                                    # the flags are not used (see the module doc)
    _field(r, 1, "uuid")
    uuid = UUID(bytes=bytes(r.unsigned() for _ in range(_UUID_BYTES)))
    _field(r, 2, "gno")
    gno = r.signed()
    _field(r, 3, "tag")
    tag = r.string()
    if not tag.isascii():
        raise DecodeError(f"{_WHAT} of {uuid}:{gno} has a tag that is not ASCII: {tag!r}")
    return f"{uuid}:{tag.decode()}:{gno}" if tag else f"{uuid}:{gno}"


def _field(r: Reader, field_id: int, name: str) -> None:
    found = r.unsigned()
    if found != field_id:
        raise DecodeError(f"{_WHAT} lacks its {name} field (id {field_id}; found id {found})")
