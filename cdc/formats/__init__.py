"""Output formats: a Debezium-style envelope or Canal's flat message; both built by cdc.emitter."""

from cdc.formats.canal import CanalFormat
from cdc.formats.debezium import DebeziumFormat

__all__ = ["DebeziumFormat", "CanalFormat"]
