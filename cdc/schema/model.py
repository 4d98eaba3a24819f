"""Tables as DDL declares them: column types (for Canal's mysqlType/sqlType, the snapshot's value
mapping and schema-change events) and primary keys. Row values are decoded from the binlog's own table
maps; this model says what the columns were declared as."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
CHARACTER_TYPES = TEXT_TYPES + ("enum", "set")    # the types that have a character set
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
TEMPORAL_TYPES = ("date", "datetime", "timestamp", "time", "year")
GEOMETRY_TYPES = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                  "geometrycollection")
KNOWN_TYPES = frozenset(INTEGER_TYPES + TEXT_TYPES + BINARY_TYPES + TEMPORAL_TYPES + GEOMETRY_TYPES
                        + ("decimal", "float", "double", "bit", "enum", "set", "json", "vector"))

# java.sql.Types codes, as Canal fills `sqlType`.
_JDBC = {"tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5, "decimal": 3, "float": 7,
         "double": 8, "bit": -7, "date": 91, "time": 92, "datetime": 93, "timestamp": 93, "year": 12, "char": 1,
         "varchar": 12, "tinytext": 2005, "text": 2005, "mediumtext": 2005, "longtext": 2005, "binary": -2,
         "varbinary": -3, "tinyblob": 2004, "blob": 2004, "mediumblob": 2004, "longblob": 2004, "enum": 12,
         "set": 12, "json": 12, "vector": -4}   # VECTOR: LONGVARBINARY, as MySQL Connector/J 9 reports it
_UNSIGNED_WIDER = {"tinyint": 5, "smallint": 4, "mediumint": 4, "int": -5, "bigint": 3}


@dataclass(frozen=True, slots=True)
class ColumnDef:
    name: str
    type: str                            # normalized base type, one of KNOWN_TYPES
    args: tuple[int, ...] = ()           # (length) / (precision, scale) / (fsp) as declared
    unsigned: bool = False
    charset: str | None = None           # character columns: declared, else the table's default
    values: tuple[str, ...] = ()         # ENUM/SET members
    nullable: bool = True

    @property
    def mysql_type(self) -> str:
        if self.values:
            text = self.type + "(" + ",".join("'" + v.replace("'", "''") + "'" for v in self.values) + ")"
        else:
            text = self.type + ("(" + ",".join(map(str, self.args)) + ")" if self.args else "")
        return text + (" unsigned" if self.unsigned else "")

    @property
    def jdbc_type(self) -> int:
        if self.unsigned and self.type in _UNSIGNED_WIDER:
            return _UNSIGNED_WIDER[self.type]
        return _JDBC.get(self.type, 2004 if self.type in GEOMETRY_TYPES else 1111)

    def to_dict(self) -> dict:
        return {"name": self.name, "typeName": self.type.upper(), "typeExpression": self.mysql_type,
                "charsetName": self.charset, "optional": self.nullable, "enumValues": list(self.values) or None}


@dataclass(frozen=True, slots=True)
class TableDef:
    db: str
    name: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...] = ()
    charset: str | None = None           # default for new columns: declared, else the database's

    @property
    def id(self) -> str:
        return f"{self.db}.{self.name}"

    def column(self, name: str) -> ColumnDef | None:
        lname = name.lower()
        return next((c for c in self.columns if c.name.lower() == lname), None)

    def renamed(self, db: str, name: str) -> "TableDef":
        return replace(self, db=db, name=name)

    def to_dict(self) -> dict:
        return {"primaryKeyColumnNames": list(self.primary_key), "defaultCharsetName": self.charset,
                "columns": [c.to_dict() for c in self.columns]}


@dataclass
class Schema:
    """All known tables by (db, table); names are case-sensitive as with lower_case_table_names=0. A
    database's default character set (None: unknown) is what a table created without one gets."""

    tables: dict[tuple[str, str], TableDef] = field(default_factory=dict)
    databases: dict[str, str | None] = field(default_factory=dict)

    def get(self, db: str, table: str) -> TableDef | None:
        return self.tables.get((db, table))

    def put(self, table: TableDef) -> None:
        self.tables[(table.db, table.name)] = table

    def drop(self, db: str, table: str) -> TableDef | None:
        return self.tables.pop((db, table), None)

    def drop_database(self, db: str) -> list[TableDef]:
        self.databases.pop(db, None)
        gone = [t for key, t in self.tables.items() if key[0] == db]
        for t in gone:
            self.drop(t.db, t.name)
        return gone
