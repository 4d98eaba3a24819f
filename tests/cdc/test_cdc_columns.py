"""A table map's columns described from itself (FULL row metadata) or from the schema history (MINIMAL,
NO_LOG), with no server: the merge, and the errors that stop the source instead of guessing."""

from __future__ import annotations

import pytest
from pymysqlreplication.constants import FIELD_TYPE as T

from cdc.binlog.events import BinlogColumn, TableMap
from cdc.errors import DecodeError
from cdc.schema.columns import BINLOG_TYPES, describe_columns
from cdc.schema.ddl import apply_ddl
from cdc.schema.model import KNOWN_TYPES, Schema

CREATE = ("CREATE TABLE t (v VARCHAR(10) CHARACTER SET latin1, ID INT UNSIGNED NOT NULL, e ENUM('a','b'), "
          "r VARBINARY(4), j JSON, PRIMARY KEY (id)) DEFAULT CHARSET=utf8mb4")
# The storage metadata a MINIMAL table map carries for that table: types, lengths, sizes; no names.
MINIMAL = (BinlogColumn(None, T.VARCHAR, max_length=10), BinlogColumn(None, T.LONG),
           BinlogColumn(None, T.ENUM, size=1), BinlogColumn(None, T.VARCHAR, max_length=4),
           BinlogColumn(None, T.JSON, length_size=4))


def _definition(*statements: str):
    schema = Schema()
    for sql in (CREATE, *statements):
        apply_ddl(schema, "shop", sql)
    return schema.get("shop", "t")


def _map(columns, primary_key=()) -> TableMap:
    return TableMap("binlog.000007", 1234, 1300, 0, 1, table_id=42, db="shop", table="t", columns=columns,
                    primary_key=primary_key)


def test_minimal_metadata_is_described_by_the_history():
    columns, pk = describe_columns(_map(MINIMAL), _definition())
    assert [c.name for c in columns] == ["v", "ID", "e", "r", "j"]
    assert [c.unsigned for c in columns] == [False, True, False, False, False]
    assert [c.charset for c in columns] == ["cp1252", None, "utf8", "binary", "utf8"]   # as FULL would give
    assert columns[2].values == ("a", "b")
    assert pk == ("ID",)                    # spelled as the column is, whatever the key clause said
    assert [(c.type, c.max_length, c.size, c.length_size) for c in columns] == [
        (c.type, c.max_length, c.size, c.length_size) for c in MINIMAL]   # the binlog's storage metadata stays


def test_full_metadata_is_used_as_it_is():
    full = (BinlogColumn("a", T.LONG, unsigned=True), BinlogColumn("b", T.VARCHAR, charset="utf8", max_length=8))
    columns, pk = describe_columns(_map(full, primary_key=(1,)), _definition())
    assert columns is full and pk == ("b",)
    assert describe_columns(_map(full), _definition())[1] == ("id",)   # no key in the map: the history's
    assert describe_columns(_map(full), None) == (full, ())


def test_no_definition_stops_with_what_to_do():
    with pytest.raises(DecodeError, match=r"shop\.t: the table map at binlog\.000007:1234 carries no column names "
                                          r"\(binlog_row_metadata is not FULL\).* has no definition of the table; "
                                          r"take a new snapshot .*snapshot: always"):
        describe_columns(_map(MINIMAL), None)


@pytest.mark.parametrize("statement,why", [
    ("ALTER TABLE t DROP COLUMN j", r"the binlog has 5 columns, the history 4 \(v, ID, e, r\): the history missed a "
                                    r"change to the table; take a new snapshot"),
    ("ALTER TABLE t MODIFY e INT", r"column 3 `e` is int in the history but ENUM in the binlog: the history missed"),
    ("ALTER TABLE t MODIFY v VARCHAR(10) CHARACTER SET klingon", r"column `v`: unknown character set 'klingon'"),
])
def test_a_definition_that_cannot_describe_the_map_stops(statement, why):
    with pytest.raises(DecodeError, match=r"shop\.t: the table map at binlog\.000007:1234 .* whose definition "
                                          rf"cannot describe them: {why}"):
        describe_columns(_map(MINIMAL), _definition(statement))


def test_a_character_column_of_unknown_charset_stops():
    schema = Schema()
    apply_ddl(schema, "", "CREATE DATABASE old")       # as recorded by an old history: no charset
    apply_ddl(schema, "old", "CREATE TABLE t (v VARCHAR(10))")
    with pytest.raises(DecodeError, match=r"column `v` has no known character set: the history never learnt its "
                                          r"table's or its database's default; take a new snapshot"):
        describe_columns(_map(MINIMAL[:1]), schema.get("old", "t"))


def test_every_declared_type_has_its_binlog_types():
    assert set(BINLOG_TYPES) == set(KNOWN_TYPES)
