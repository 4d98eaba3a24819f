"""A MySQL/MariaDB DDL parser for what changes table shapes, applied to a Schema.

It understands CREATE/DROP/RENAME/TRUNCATE TABLE, ALTER TABLE (ADD/DROP/CHANGE/MODIFY/RENAME COLUMN,
ADD/DROP PRIMARY KEY, RENAME TO, CONVERT TO CHARACTER SET), CREATE/ALTER/DROP DATABASE, and knows which
other statements cannot change a table's columns (grants, users, views, routines, indexes, maintenance).
Column attributes it does not need (defaults, comments, generated expressions, checks, visibility) are
skipped to the next top-level comma, so new attribute syntax does not break it; MySQL's version comments
(`/*!80023 INVISIBLE */`) are read as plain text. Character sets are resolved as the server resolves
them when the statement runs: a column without one takes its table's default, a table its database's,
and COLLATE alone names its character set. Anything else raises UnsupportedDdlError naming the statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cdc.errors import UnsupportedDdlError
from cdc.charsets import charset_of_collation
from cdc.schema.model import CHARACTER_TYPES, KNOWN_TYPES, ColumnDef, Schema, TableDef

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|\#[^\n]*|/\*(?!M?!).*?\*/)
  | (?P<exec>/\*M?!\d*)
  | (?P<execend>\*/)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<word>[A-Za-z_$\u0080-\uffff][A-Za-z0-9_$@\u0080-\uffff]*)
  | (?P<punct>.)
""", re.X | re.S)

_IGNORED_FIRST = {"GRANT", "REVOKE", "FLUSH", "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "INSTALL", "UNINSTALL",
                  "SAVEPOINT", "RELEASE", "XA", "SET", "RESET", "PURGE", "CALL", "DO", "HANDLER", "LOAD",
                  "CHECKSUM", "BINLOG", "SHUTDOWN", "KILL", "USE"}
_IGNORED_OBJECTS = {"USER", "ROLE", "VIEW", "PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "SERVER", "INDEX",
                    "SEQUENCE", "TABLESPACE", "LOGFILE", "PACKAGE", "RESOURCE", "SPATIAL", "AGGREGATE"}
_TYPE_ALIASES = {"integer": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint", "int4": "int",
                 "int8": "bigint", "middleint": "mediumint", "dec": "decimal", "numeric": "decimal",
                 "fixed": "decimal", "real": "double", "character": "char", "nchar": "char", "nvarchar": "varchar",
                 "varcharacter": "varchar", "long": "mediumtext", "float4": "float", "float8": "double",
                 "geomcollection": "geometrycollection"}    # how MySQL 8+ prints GEOMETRYCOLLECTION
_NATIONAL = "utf8mb3"   # NATIONAL CHAR, NCHAR, NVARCHAR: MySQL's and MariaDB's national character set


@dataclass(frozen=True, slots=True)
class TableChange:
    """One table affected by a DDL statement, for schema-change events."""

    type: str                  # CREATE, ALTER, DROP, RENAME, TRUNCATE
    db: str
    table: str
    definition: TableDef | None = None
    previous_id: str | None = None  # RENAME: the old db.table


class _Tokens:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.items: list[tuple[str, str]] = []
        for m in _TOKEN.finditer(sql):
            kind = m.lastgroup
            if kind in ("ws", "comment", "exec", "execend"):
                continue
            self.items.append((kind, m.group()))
        self.i = 0
        self.table: tuple[str, str] | None = None   # the statement's first table, for error reports

    def fail(self, why: str) -> UnsupportedDdlError:
        near = " ".join(v for _, v in self.items[self.i:self.i + 6])
        error = UnsupportedDdlError(f"{why} near {near!r} in: {self.sql[:300]}")
        error.table = self.table
        return error

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.items[j][1].upper() if j < len(self.items) else ""

    def at_end(self) -> bool:
        return self.i >= len(self.items) or self.items[self.i][1] == ";"

    def next(self) -> tuple[str, str]:
        if self.i >= len(self.items):
            raise self.fail("unexpected end of statement")
        self.i += 1
        return self.items[self.i - 1]

    def accept(self, *words: str) -> bool:
        if self.peek() in words:
            self.i += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        if all(self.peek(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.accept(word):
            raise self.fail(f"expected {word}")

    def ident(self) -> str:
        kind, value = self.next()
        if kind == "quoted":
            return value[1:-1].replace("``", "`")
        if kind == "string":
            return _unquote(value)
        if kind in ("word", "number"):
            return value
        self.i -= 1
        raise self.fail("expected a name")

    def qualified(self, default_db: str) -> tuple[str, str]:
        first = self.ident()
        if self.peek() == ".":
            self.next()
            name = (first, self.ident())
        elif not default_db:
            raise self.fail(f"table {first!r} has no database and the statement ran without a default database")
        else:
            name = (default_db, first)
        self.table = self.table or name
        return name

    def skip_group(self) -> None:
        """Skip a parenthesized group starting at '('."""
        depth = 0
        while True:
            _, v = self.next()
            if v == "(":
                depth += 1
            elif v == ")":
                depth -= 1
                if depth == 0:
                    return

    def skip_to_separator(self) -> None:
        """Skip to the next top-level ',' or ')' (not consumed)."""
        while not self.at_end() and self.peek() not in (",", ")"):
            if self.peek() == "(":
                self.skip_group()
            else:
                self.next()

    def if_exists(self) -> None:
        self.accept_seq("IF", "EXISTS") or self.accept_seq("IF", "NOT", "EXISTS")


def _unquote(s: str) -> str:
    q = s[0]
    body = s[1:-1].replace(q + q, q)
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0", "r": "\r"}.get(m.group(1), m.group(1)), body)


def _data_type(tok: _Tokens, table_charset: str | None) -> tuple[ColumnDef, bool]:
    """Parse a data type and the rest of a column definition; returns (column without name, is primary key)."""
    word = tok.ident().lower()
    if word == "double" and tok.accept("PRECISION"):
        pass
    national = word in ("national", "nchar", "nvarchar")
    if word == "national":
        word = tok.ident().lower()
    if word in ("char", "character", "nchar") and tok.accept("VARYING", "VARCHAR"):   # NCHAR VARCHAR too
        word = "varchar"
    if word == "long" and tok.peek() in ("VARCHAR", "VARBINARY"):
        word = "mediumtext" if tok.next()[1].upper() == "VARCHAR" else "mediumblob"
    word = _TYPE_ALIASES.get(word, word)
    args: list[int] = []
    values: list[str] = []
    if tok.peek() == "(":
        tok.next()
        while tok.peek() != ")":
            kind, v = tok.next()
            if kind == "number":
                args.append(int(float(v)))
            elif kind == "string":
                values.append(_unquote(v))
            elif v != ",":
                raise tok.fail(f"unexpected {v!r} in type arguments")
        tok.next()
    unsigned = False
    charset = collation = None
    nullable, primary = True, False
    if word in ("bool", "boolean"):
        word, args = "tinyint", [1]
    elif word == "serial":
        word, unsigned, nullable = "bigint", True, False
    elif word == "float" and len(args) == 1:
        word, args = ("float" if args[0] <= 24 else "double"), []
    elif word == "decimal" and not args:
        args = [10, 0]
    elif word == "decimal" and len(args) == 1:
        args.append(0)
    elif word in ("char", "binary") and not args:
        args = [1]
    elif word == "vector" and not args:
        args = [2048]
    if word not in KNOWN_TYPES:
        raise tok.fail(f"column type {word!r} is not supported")
    while not tok.at_end() and tok.peek() not in (",", ")", "FIRST", "AFTER"):
        w = tok.peek()
        if w in ("UNSIGNED", "ZEROFILL"):
            tok.next()
            unsigned = True
        elif w == "SIGNED":
            tok.next()
        elif w in ("CHARACTER", "CHARSET"):
            tok.next()
            tok.accept("SET")
            charset = tok.ident().lower()
        elif w == "COLLATE":
            tok.next()
            collation = tok.ident()
        elif w == "ASCII":
            tok.next()
            charset = "latin1"
        elif w == "UNICODE":
            tok.next()
            charset = "ucs2"
        elif w == "NOT" and tok.peek(1) == "NULL":
            tok.i += 2
            nullable = False
        elif w == "PRIMARY" and tok.peek(1) == "KEY":
            tok.i += 2
            primary, nullable = True, False
        elif w == "KEY":
            tok.next()
            primary, nullable = True, False
        elif w in ("DEFAULT", "COMMENT", "ON", "REFERENCES", "CHECK", "AS", "GENERATED",
                   "CONSTRAINT", "COLUMN_FORMAT", "STORAGE", "ENGINE_ATTRIBUTE"):
            tok.next()
            if tok.peek() == "(":
                tok.skip_group()
            elif not tok.at_end() and tok.peek() not in (",", ")"):
                tok.next()
                while tok.peek() == "(":     # DEFAULT current_timestamp(6), ON UPDATE now()
                    tok.skip_group()
        elif tok.peek() == "(":
            tok.skip_group()
        else:
            tok.next()
    if word in CHARACTER_TYPES:
        charset = charset or (_NATIONAL if national else None) or _collation_charset(tok, collation) or table_charset
    return ColumnDef(name="", type=word, args=tuple(args), unsigned=unsigned, charset=charset,
                     values=tuple(values), nullable=nullable), primary


def _key_columns(tok: _Tokens) -> tuple[str, ...]:
    tok.expect("(")
    names = []
    while True:
        names.append(tok.ident())
        if tok.peek() == "(":          # prefix length: col(10)
            tok.skip_group()
        tok.accept("ASC", "DESC")
        if tok.accept(","):
            continue
        tok.expect(")")
        return tuple(names)


def _collation_charset(tok: _Tokens, collation: str | None) -> str | None:
    """The character set a COLLATE clause implies (None without one)."""
    if collation is None:
        return None
    charset = charset_of_collation(collation)
    if charset is None:
        raise tok.fail(f"collation {collation!r} belongs to no known character set")
    return charset


def _charset_options(tok: _Tokens, stop: tuple[str, ...] = ()) -> str | None:
    """Scan table or database options (to the end, or to a top-level `stop` token) for [DEFAULT]
    CHARACTER SET / CHARSET / COLLATE: the default character set they declare, or None."""
    charset = collation = None
    while not tok.at_end() and tok.peek() not in stop:
        if tok.accept("CHARSET") or tok.accept_seq("CHARACTER", "SET"):
            tok.accept("=")
            charset = tok.ident().lower()
        elif tok.accept("COLLATE"):
            tok.accept("=")
            collation = tok.ident()
        elif tok.peek() == "(":
            tok.skip_group()
        else:
            tok.next()
    return charset or _collation_charset(tok, collation)


def _create_table(tok: _Tokens, schema: Schema, db: str) -> list[TableChange]:
    tok.if_exists()
    db, name = tok.qualified(db)
    if tok.accept("LIKE") or (tok.peek() == "(" and tok.peek(1) == "LIKE" and tok.next()):
        src_db, src = tok.qualified(db)
        source = schema.get(src_db, src)
        if source is None:
            raise tok.fail(f"CREATE TABLE ... LIKE {src_db}.{src}: the source table is not in the schema history")
        table = source.renamed(db, name)
        schema.put(table)
        return [TableChange("CREATE", db, name, table)]
    if tok.peek() != "(":
        raise tok.fail("CREATE TABLE without a column list (e.g. CREATE TABLE ... AS SELECT) is not supported")
    start = tok.i
    tok.skip_group()
    end = tok.i
    charset = _charset_options(tok) or schema.databases.get(db)
    tok.i = start + 1
    columns: list[ColumnDef] = []
    pk: tuple[str, ...] = ()
    while tok.i < end - 1:
        w = tok.peek()
        if w == "PRIMARY" or (w == "CONSTRAINT" and "PRIMARY" in (tok.peek(1), tok.peek(2))):
            while not tok.accept("KEY"):
                tok.next()
            if tok.peek() != "(":
                tok.ident()             # PRIMARY KEY name (...)? rare, skip the name
            pk = _key_columns(tok)
            tok.skip_to_separator()
        elif w in ("KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN", "CHECK", "PERIOD"):
            tok.skip_to_separator()
        else:
            col_name = tok.ident()
            column, primary = _data_type(tok, charset)
            columns.append(replace(column, name=col_name))
            if primary:
                pk = (col_name,)
        tok.accept(",")
    tok.i = end
    pk_set = {p.lower() for p in pk}
    columns = [replace(c, nullable=False) if c.name.lower() in pk_set else c for c in columns]
    table = TableDef(db, name, tuple(columns), pk, charset)
    schema.put(table)
    return [TableChange("CREATE", db, name, table)]


def _place(columns: list[ColumnDef], column: ColumnDef, tok: _Tokens, at: int | None = None) -> None:
    if tok.accept("FIRST"):
        columns.insert(0, column)
    elif tok.accept("AFTER"):
        after = tok.ident().lower()
        idx = next((k for k, c in enumerate(columns) if c.name.lower() == after), None)
        if idx is None:
            raise tok.fail(f"AFTER {after}: no such column")
        columns.insert(idx + 1, column)
    elif at is not None:
        columns.insert(at, column)
    else:
        columns.append(column)


def _index_of(columns: list[ColumnDef], name: str, tok: _Tokens, if_exists: bool) -> int | None:
    idx = next((k for k, c in enumerate(columns) if c.name.lower() == name.lower()), None)
    if idx is None and not if_exists:
        raise tok.fail(f"column {name!r} is not in the schema history")
    return idx


def _alter_table(tok: _Tokens, schema: Schema, db: str) -> list[TableChange]:
    db, name = tok.qualified(db)
    table = schema.get(db, name)
    if table is None:
        raise tok.fail(f"ALTER TABLE {db}.{name}: the table is not in the schema history")
    columns = list(table.columns)
    pk = table.primary_key
    charset = table.charset
    new_db, new_name = db, name
    while not tok.at_end():
        w = tok.peek()
        if tok.accept("ADD"):
            if tok.peek() in ("PRIMARY", "CONSTRAINT") and "PRIMARY" in (tok.peek(), tok.peek(1), tok.peek(2)):
                while not tok.accept("KEY"):
                    tok.next()
                pk = _key_columns(tok)
                tok.skip_to_separator()
            elif tok.peek() in ("INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "CONSTRAINT", "FOREIGN", "CHECK",
                                "PARTITION", "PERIOD", "SYSTEM"):
                tok.skip_to_separator()
            else:
                tok.accept("COLUMN")
                exists = tok.accept_seq("IF", "NOT", "EXISTS")
                if tok.peek() == "(":
                    tok.next()
                    while True:
                        col_name = tok.ident()
                        column, primary = _data_type(tok, charset)
                        columns.append(replace(column, name=col_name))
                        if not tok.accept(","):
                            break
                    tok.expect(")")
                else:
                    col_name = tok.ident()
                    column, primary = _data_type(tok, charset)
                    if not (exists and _index_of(columns, col_name, tok, True) is not None):
                        _place(columns, replace(column, name=col_name), tok)
                    if primary:
                        pk = (col_name,)
        elif tok.accept("DROP"):
            if tok.accept_seq("PRIMARY", "KEY"):
                pk = ()
            elif tok.peek() in ("INDEX", "KEY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "PERIOD", "SYSTEM"):
                tok.skip_to_separator()
            else:
                tok.accept("COLUMN")
                exists = tok.accept_seq("IF", "EXISTS")
                col_name = tok.ident()
                idx = _index_of(columns, col_name, tok, exists)
                if idx is not None:
                    columns.pop(idx)
                    pk = tuple(p for p in pk if p.lower() != col_name.lower())
                tok.accept("RESTRICT", "CASCADE")
        elif w in ("CHANGE", "MODIFY"):
            tok.next()
            tok.accept("COLUMN")
            exists = tok.accept_seq("IF", "EXISTS")
            old = tok.ident()
            new = tok.ident() if w == "CHANGE" else old
            column, primary = _data_type(tok, charset)
            idx = _index_of(columns, old, tok, exists)
            if idx is not None:
                prev = columns.pop(idx)
                _place(columns, replace(column, name=new, nullable=column.nullable), tok, at=idx)
                pk = tuple(new if p.lower() == prev.name.lower() else p for p in pk)
                if primary:
                    pk = (new,)
        elif tok.accept_seq("RENAME", "COLUMN"):
            old = tok.ident()
            tok.expect("TO")
            new = tok.ident()
            idx = _index_of(columns, old, tok, False)
            columns[idx] = replace(columns[idx], name=new)
            pk = tuple(new if p.lower() == old.lower() else p for p in pk)
        elif tok.accept("RENAME"):
            if tok.peek() in ("INDEX", "KEY"):
                tok.skip_to_separator()
            else:
                tok.accept("TO", "AS")
                new_db, new_name = tok.qualified(db)
        elif tok.accept_seq("CONVERT", "TO"):   # character columns change too, binary strings do not
            charset = _charset_options(tok, stop=(",", ")")) or charset
            columns = [replace(c, charset=charset) if c.type in CHARACTER_TYPES and c.charset != "binary" else c
                       for c in columns]
        else:   # ALTER COLUMN ... DEFAULT, ENGINE=, ALGORITHM=, LOCK=, FORCE, ORDER BY, partitioning, options
            charset = _charset_options(tok, stop=(",", ")")) or charset     # [DEFAULT] CHARSET= / COLLATE=
        if not tok.accept(","):
            if not tok.at_end():
                tok.skip_to_separator()
                tok.accept(",")
    pk_set = {p.lower() for p in pk}
    columns = [replace(c, nullable=False) if c.name.lower() in pk_set else c for c in columns]
    altered = TableDef(new_db, new_name, tuple(columns), pk, charset)
    if (new_db, new_name) != (db, name):
        schema.drop(db, name)
        schema.put(altered)
        return [TableChange("RENAME", new_db, new_name, altered, previous_id=f"{db}.{name}")]
    schema.put(altered)
    return [TableChange("ALTER", db, name, altered)]


def _rename_tables(tok: _Tokens, schema: Schema, db: str) -> list[TableChange]:
    changes = []
    while True:
        old_db, old = tok.qualified(db)
        tok.expect("TO")
        new_db, new = tok.qualified(db)
        table = schema.drop(old_db, old)
        if table is not None:
            table = table.renamed(new_db, new)
            schema.put(table)
        changes.append(TableChange("RENAME", new_db, new, table, previous_id=f"{old_db}.{old}"))
        if not tok.accept(","):
            return changes


def _drop_tables(tok: _Tokens, schema: Schema, db: str) -> list[TableChange]:
    tok.if_exists()
    changes = []
    while True:
        t_db, t = tok.qualified(db)
        schema.drop(t_db, t)
        changes.append(TableChange("DROP", t_db, t))
        if not tok.accept(","):
            return changes


def _skip_view_options(tok: _Tokens) -> None:
    """ALGORITHM = x, DEFINER = user, SQL SECURITY x: before VIEW/TRIGGER/PROCEDURE/FUNCTION/EVENT."""
    while True:
        if tok.accept("DEFINER"):
            tok.accept("=")
            tok.next()
            if tok.peek() == "(":           # CURRENT_USER()
                tok.skip_group()
            if tok.accept("@"):
                tok.next()
        elif tok.accept("ALGORITHM"):
            tok.accept("=")
            tok.next()
        elif tok.accept_seq("SQL", "SECURITY"):
            tok.next()
        else:
            return


def _create_database(tok: _Tokens, schema: Schema, server_charset: str | None) -> list[TableChange]:
    keep = tok.accept_seq("IF", "NOT", "EXISTS")
    name = tok.ident()
    charset = _charset_options(tok) or server_charset   # without one, the server's default at the time
    if not (keep and name in schema.databases):
        schema.databases[name] = charset
    return []


def _alter_database(tok: _Tokens, schema: Schema, db: str) -> list[TableChange] | None:
    name = db if tok.peek() in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "READ", "ENCRYPTION") else tok.ident()
    charset = _charset_options(tok)
    if charset is None:          # READ ONLY, ENCRYPTION, UPGRADE DATA DIRECTORY NAME: nothing tables inherit
        return None
    schema.databases[name] = charset
    return []


def apply_ddl(schema: Schema, default_db: str, sql: str, server_charset: str | None = None
              ) -> list[TableChange] | None:
    """Apply one statement to `schema`. Returns the tables it changed, or None for a statement that cannot
    change any table's columns. Raises UnsupportedDdlError (schema untouched) for anything else.
    `server_charset`: the server's default character set when the statement ran (what CREATE DATABASE
    without one gives the database)."""
    tok = _Tokens(sql)
    first = tok.peek()
    if first in _IGNORED_FIRST or not first:
        return None
    working = Schema(dict(schema.tables), dict(schema.databases))
    changes = _statement(tok, working, default_db, first, server_charset)
    if changes is not None:
        schema.tables, schema.databases = working.tables, working.databases
    return changes


def _statement(tok: _Tokens, schema: Schema, db: str, first: str, server_charset: str | None
               ) -> list[TableChange] | None:
    tok.next()
    if first == "CREATE":
        tok.accept_seq("OR", "REPLACE")
        _skip_view_options(tok)
        if tok.peek() in ("TEMPORARY",):
            return None
        if tok.accept("TABLE"):
            return _create_table(tok, schema, db)
        if tok.accept("DATABASE", "SCHEMA"):
            return _create_database(tok, schema, server_charset)
        if tok.peek() in _IGNORED_OBJECTS or tok.peek() in ("UNIQUE", "FULLTEXT", "ONLINE"):
            return None
    elif first == "ALTER":
        tok.accept("ONLINE")
        tok.accept("IGNORE")
        if tok.accept("TABLE"):
            return _alter_table(tok, schema, db)
        if tok.accept("DATABASE", "SCHEMA"):
            return _alter_database(tok, schema, db)
        _skip_view_options(tok)
        if tok.peek() in _IGNORED_OBJECTS:
            return None
    elif first == "DROP":
        if tok.accept("TEMPORARY"):
            return None
        if tok.accept("TABLE"):
            return _drop_tables(tok, schema, db)
        if tok.accept("DATABASE", "SCHEMA"):
            tok.if_exists()
            name = tok.ident()
            return [TableChange("DROP", t.db, t.name) for t in schema.drop_database(name)]
        if tok.peek() in _IGNORED_OBJECTS or tok.peek() in ("PREPARE",):
            return None
    elif first == "RENAME":
        if tok.accept("TABLE"):
            return _rename_tables(tok, schema, db)
        if tok.peek() in ("USER",):
            return None
    elif first == "TRUNCATE":
        tok.accept("TABLE")
        t_db, t = tok.qualified(db)
        return [TableChange("TRUNCATE", t_db, t, schema.get(t_db, t))]
    raise tok.fail(f"{first} statement is not supported")
