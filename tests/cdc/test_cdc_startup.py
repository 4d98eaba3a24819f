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


def test_read_only_incremental_snapshots_need_gtids(mysql_factory):
    """signals: {topic} without a table takes GTID sets as watermarks: a MySQL without GTIDs is refused at
    startup, saying what to set (a signal table, whose rows are the watermarks, needs none)."""
    server = mysql_factory(log_bin="binlog", server_id="1", gtid_mode="OFF")
    with pytest.raises(ConfigurationError, match=r"signals: \{topic: sig\} without a signal table .* needs GTIDs, "
                                                 r"and gtid_mode is OFF on the server: set gtid_mode=ON"):
        _run(server, signal_topic="sig")
    _run(server, signal_topic="sig", signal_table="db.signals")


def test_user_without_privileges(server, db):
    server.sql(f"CREATE USER 'weak_{db}'@'%' IDENTIFIED BY 'pw'", f"GRANT SELECT ON `{db}`.* TO 'weak_{db}'@'%'")
    with pytest.raises(ConfigurationError,
                       match=rf"user 'weak_{db}'@'%' lacks REPLICATION SLAVE, REPLICATION CLIENT: run GRANT"):
        _run(server, user=f"weak_{db}", password="pw")
    server.sql(f"CREATE USER 'noselect_{db}'@'%' IDENTIFIED BY 'pw'",
                f"GRANT REPLICATION SLAVE, {server.binlog_monitor} ON *.* TO 'noselect_{db}'@'%'")
    with pytest.raises(ConfigurationError, match=r"lacks SELECT"):
        _run(server, user=f"noselect_{db}", password="pw")


def test_unknown_config_key_is_refused():
    from pydantic import ValidationError
    from cdc.config import SourceConfig
    with pytest.raises(ValidationError, match="snapshot_mode"):
        SourceConfig(name="x", user="u", server_id=1, snapshot_mode="initial")
    with pytest.raises(ValidationError, match="not a regular expression"):
        SourceConfig(name="x", user="u", server_id=1, table_include=["db.(unclosed"])


def test_tls_settings_must_fit_the_mode():
    from pydantic import ValidationError
    from cdc.config import SourceConfig
    with pytest.raises(ValidationError, match="ssl_mode verify_ca verifies the server's certificate: set ssl_ca"):
        SourceConfig(name="x", user="u", server_id=1, ssl_mode="verify_ca")
    with pytest.raises(ValidationError, match="TLS files are set but ssl_mode is preferred"):
        SourceConfig(name="x", user="u", server_id=1, ssl_ca="/ca.pem")
    with pytest.raises(ValidationError, match="ssl_cert and ssl_key go together"):
        SourceConfig(name="x", user="u", server_id=1, ssl_mode="required", ssl_cert="/c.pem")


def _user(server, db: str, name: str, require: str = "NONE") -> dict:
    """A user of the default authentication plugin (MySQL: caching_sha2_password) with the source's grants,
    its authentication cache emptied so the next login takes the full exchange."""
    server.sql(f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw-{name}' REQUIRE {require}",
               f"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'%'",
               "FLUSH PRIVILEGES")
    return {"user": name, "password": f"pw-{name}"}


def _snapshot_rows(server, db: str, **settings) -> list:
    capture = Capture(server)
    return [c["after"] for c in Capture.changes(capture.run(capture.config(db, **settings)))]


def test_caching_sha2_full_authentication_over_plain_tcp(mysql):
    db = mysql.new_database()
    mysql.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
    user = _user(mysql, db, f"sha2_{db}")
    plugin = mysql.sql(f"SELECT plugin FROM mysql.user WHERE user = '{user['user']}'")[0][0]
    assert plugin == "caching_sha2_password"          # the default: MySQL 9 has no mysql_native_password
    assert _snapshot_rows(mysql, db, ssl_mode="disabled", **user) == [{"id": 1}]   # RSA key exchange, nothing cached


def test_tls_modes_against_a_user_that_requires_tls(mysql):
    db = mysql.new_database()
    mysql.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)", f"INSERT INTO `{db}`.t VALUES (1)")
    user = _user(mysql, db, f"tls_{db}", require="SSL")
    ca = str(mysql.data_dir / "ca.pem")                  # the server's own auto-generated CA
    with pytest.raises(Exception, match="Access denied"):
        _snapshot_rows(mysql, db, ssl_mode="disabled", **user)
    assert _snapshot_rows(mysql, db, **user) == [{"id": 1}]          # preferred, the default
    assert _snapshot_rows(mysql, db, ssl_mode="required", **user) == [{"id": 1}]
    assert _snapshot_rows(mysql, db, ssl_mode="verify_ca", ssl_ca=ca, **user) == [{"id": 1}]
    with pytest.raises(Exception, match="certificate verify failed|hostname"):   # issued to no host name
        _snapshot_rows(mysql, db, ssl_mode="verify_identity", ssl_ca=ca, **user)
