"""Table structures: the model, a MySQL DDL parser that changes it, and the schema history."""

from cdc.schema.ddl import TableChange, apply_ddl
from cdc.schema.history import FileHistoryStore, HistoryStore, MemoryHistoryStore, SchemaHistory, TopicHistoryStore
from cdc.schema.model import ColumnDef, Schema, TableDef

__all__ = ["ColumnDef", "TableDef", "Schema", "apply_ddl", "TableChange", "SchemaHistory", "HistoryStore",
           "MemoryHistoryStore", "FileHistoryStore", "TopicHistoryStore"]
