"""Startup checks against misconfigured servers and users, each failing with what to change."""

from __future__ import annotations

import pytest

from cdc_harness import Capture
from cdc.errors import ConfigurationError


def _run(server, **overrides):
    return Capture(server).run(Capture(server).config("x", **overrides))


def test_binlog_off(server_factory):
    server = server_factory(server_id="1", skip_log_bin=None)        # (MySQL logs by default)
    with pytest.raises(ConfigurationError, match=r"binary logging is off.*--log-bin"):
        _run(server)


def test_statement_format_and_minimal_row_image(server_factory):
    server = server_factory(log_bin="binlog", server_id="1", binlog_format="STATEMENT", binlog_row_image="MINIMAL")
    with pytest.raises(ConfigurationError) as err:
        _run(server)
    message = str(err.value)
    assert "binlog_format is STATEMENT: set binlog_format=ROW" in message
    assert "binlog_row_image is MINIMAL: set binlog_row_image=FULL" in message
    # the servers' default row metadata (MariaDB NO_LOG, MySQL MINIMAL) is fine: the schema history fills it in
    assert server.sql("SELECT @@binlog_row_metadata")[0][0] in ("NO_LOG", "MINIMAL")
    assert "binlog_row_metadata" not in message


def test_user_without_privileges(server, db):
    server.sql(f"CREATE USER 'weak_{db}'@'%' IDENTIFIED BY 'pw'", f"GRANT SELECT ON `{db}`.* TO 'weak_{db}'@'%'")
    with pytest.raises(ConfigurationError,
                       match=rf"user 'weak_{db}'@'%' lacks REPLICATION SLAVE, REPLICATION CLIENT: run GRANT"):
        _run(server, user=f"weak_{db}", password="pw")
    server.sql(f"CREATE USER 'noselect_{db}'@'%' IDENTIFIED BY 'pw'",
                f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'noselect_{db}'@'%'")
    with pytest.raises(ConfigurationError, match=r"lacks SELECT"):
        _run(server, user=f"noselect_{db}", password="pw")


def test_unknown_config_key_is_refused():
    from pydantic import ValidationError
    from cdc.config import SourceConfig
    with pytest.raises(ValidationError, match="snapshot_mode"):
        SourceConfig(name="x", user="u", server_id=1, snapshot_mode="initial")
    with pytest.raises(ValidationError, match="not a regular expression"):
        SourceConfig(name="x", user="u", server_id=1, table_include=["db.(unclosed"])
