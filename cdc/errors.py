"""Errors the source raises; every message says what to change."""


class CdcError(Exception):
    """Base class: the source cannot go on."""


class ConfigurationError(CdcError):
    """The server or the source configuration is not usable (checked at startup)."""


class PositionLostError(CdcError):
    """The stored binlog position is no longer on the server."""


class UnsupportedDdlError(CdcError):
    """A DDL statement could not be parsed or is not supported. `table` is (db, name) when known."""

    table: tuple[str, str] | None = None


class DecodeError(CdcError):
    """A binlog event could not be decoded."""
