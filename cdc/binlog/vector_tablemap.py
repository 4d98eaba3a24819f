"""MySQL 9's VECTOR columns in table maps, taught to pymysqlreplication, which predates them.

In a TABLE_MAP event a VECTOR column (type code 242) has one byte of column metadata, the size of its
values' length prefix (4, as for LONGBLOB); the optional metadata counts it among the character columns
(charset binary) and carries one field pymysqlreplication does not know, VECTOR_DIMENSIONALITY (13).
Unpatched, pymysqlreplication reads no metadata byte for the column, so every later column's metadata,
the null bitmap and the optional metadata are read from the wrong offsets; and field 13 stops it.

`install()` adds those three rules to pymysqlreplication's table-map parser. It changes nothing for
tables without VECTOR columns, and nothing at all once pymysqlreplication knows the type itself.
"""

from __future__ import annotations

from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import MetadataFieldType, TableMapEvent

VECTOR = 242
_CHECKSUM = 4   # the CRC32 after the optional metadata (pymysqlreplication always asks for checksums)
_KNOWN_FIELDS = frozenset(f.value for f in MetadataFieldType)
_installed = False


def install() -> None:
    global _installed
    if _installed or hasattr(FIELD_TYPE, "VECTOR"):
        return
    _installed = True
    parse_definition = Column._Column__parse_column_definition
    is_character = TableMapEvent._is_character_column
    optional_metadata = TableMapEvent._get_optional_meta_data

    def parse_column_definition(self, column_type, packet):
        parse_definition(self, column_type, packet)
        if column_type == VECTOR:
            self.length_size = packet.read_uint8()

    def is_character_column(column_type, dbms="mysql"):
        return column_type == VECTOR or is_character(column_type, dbms=dbms)

    def get_optional_meta_data(self):
        _drop_unknown_fields(self.packet.packet)
        return optional_metadata(self)

    Column._Column__parse_column_definition = parse_column_definition
    TableMapEvent._is_character_column = staticmethod(is_character_column)
    TableMapEvent._get_optional_meta_data = get_optional_meta_data


def _drop_unknown_fields(packet) -> None:
    """Remove the optional-metadata fields (type, length, value) pymysqlreplication cannot parse from the
    rest of `packet` (PyMySQL's packet, read up to the optional metadata). The format makes every field
    skippable by its length; binlake needs none of the unknown ones (VECTOR_DIMENSIONALITY: a value's
    length prefix already says how many floats it holds)."""
    data, start = packet._data, packet._position
    end = len(data) - _CHECKSUM
    kept, pos, dropped = [], start, False
    while pos < end:
        field = pos
        length, pos = _length_encoded(data, pos + 1)
        pos += length
        if data[field] in _KNOWN_FIELDS:
            kept.append(data[field:pos])
        else:
            dropped = True
    if dropped:
        packet._data = data[:start] + b"".join(kept) + data[end:]


def _length_encoded(data: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of a MySQL length-encoded integer at data[pos]."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + width], "little"), pos + 1 + width
