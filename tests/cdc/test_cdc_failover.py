"""Choosing the server to resume on after a failover (cdc/failover.py), without servers: GTID set
arithmetic, the order hosts are tried in, waiting for a replica to catch up, and stopping with the
missing set. The failover itself, with real servers in replication, is tests/e2e/test_mysql_failover.py."""

from __future__ import annotations

import pymysql
import pytest
from pydantic import ValidationError

from cdc.config import SourceConfig
from cdc.connector import MySqlConfig
from cdc.failover import HistoryDiverged, NoServerAnswered, choose_server
from cdc.gtid import MySqlGtidSet
from cdc.offsets import BinlogPosition, GtidSet
from cdc.schema.history import MemoryHistoryStore, SchemaHistory

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
V = "4e11fa47-71ca-11e1-9e33-c80aa9429562"


@pytest.mark.parametrize("mine, theirs, missing", [
    (f"{U}:1-10", f"{U}:1-20", ""),
    (f"{U}:1-10:12,{V}:1-3", f"{U}:1-5:7", f"{U}:6:8-10:12,{V}:1-3"),
    (f"{U}:1-4:batch:1-5", f"{U}:1-4:batch:2-3", f"{U}:batch:1:4-5"),
    ("", f"{U}:1", ""),
    ("0-1-100,1-1-5", "0-2-101,1-1-5", ""),          # MariaDB: per domain, the sequence number
    ("0-1-100,1-1-5", "0-2-99,1-1-7", "0-1-100"),
    ("0-1-100,2-1-5", "0-1-100", "2-1-5"),
])
def test_what_a_server_lacks(mine, theirs, missing):
    assert GtidSet(mine).missing_from(GtidSet(theirs)) == missing


def test_subtract_is_gtid_subtract():
    assert str(MySqlGtidSet(f"{U}:1-100").subtract(MySqlGtidSet(f"{U}:2-3:50-60:99-200"))) == f"{U}:1:4-49:61-98"


def config(**keys) -> SourceConfig:
    return SourceConfig(name="n", user="u", server_id=9, restart_by="gtid", hosts=("a:1", "b:2", "c"),
                        failover_catch_up_s=5, **keys)


class Servers:
    """A fake probe: address -> executed GTID set, or None for a server that does not answer."""

    def __init__(self, **executed: str | None) -> None:
        self.executed = executed
        self.now = 0.0
        self.probed: list[str] = []

    def probe(self, c: SourceConfig) -> str:
        address = f"{c.host}:{c.port}"
        self.probed.append(address)
        found = self.executed[address]
        if found is None:
            raise pymysql.err.OperationalError(2003, f"Can't connect to MySQL server on '{address}'")
        return found

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def choose(self, published: str | None) -> SourceConfig:
        return choose_server(config(), published, probe=self.probe, clock=lambda: self.now, sleep=self.sleep)


def test_the_first_server_that_answers_and_holds_what_was_published():
    servers = Servers(**{"a:1": None, "b:2": f"{U}:1-5", "c:3306": f"{U}:1-9"})
    chosen = servers.choose(f"{U}:1-7")
    assert (chosen.host, chosen.port) == ("c", 3306)
    assert servers.probed == ["a:1", "b:2", "c:3306"]
    assert (servers.choose(f"{U}:1-5").host, servers.now) == ("b", 0)   # b holds that: no wait


def test_a_replica_still_applying_is_waited_for():
    servers = Servers(**{"a:1": None, "b:2": f"{U}:1-5", "c:3306": None})
    original = servers.sleep

    def catching_up(seconds):
        original(seconds)
        if servers.now >= 2:
            servers.executed["b:2"] = f"{U}:1-8"
    servers.sleep = catching_up
    assert servers.choose(f"{U}:1-7").host == "b"
    assert 2 <= servers.now < 5


def test_a_server_lacking_published_transactions_stops_the_source_with_the_missing_set():
    servers = Servers(**{"a:1": None, "b:2": f"{U}:1-5", "c:3306": f"{U}:1-3"})
    with pytest.raises(HistoryDiverged) as stopped:
        servers.choose(f"{U}:1-7")
    message = str(stopped.value)
    assert f"b:2 lacks {U}:6-7" in message and f"c:3306 lacks {U}:4-7" in message
    assert "second history" in message and "a:1" in message
    assert servers.now >= 5


def test_no_server_answering_is_retried_by_the_runtime():
    servers = Servers(**{"a:1": None, "b:2": None, "c:3306": None})
    with pytest.raises(NoServerAnswered, match="no server answered: a:1 .*b:2 .*c:3306"):
        servers.choose(f"{U}:1-7")


def test_several_hosts_need_restarts_by_gtid():
    with pytest.raises(ValidationError, match="restart_by: gtid"):
        SourceConfig(name="n", user="u", server_id=9, hosts=("a:1", "b:2"))
    database = {"hosts": ["a:3306", "b:3306"], "user": "u", "server_id": 9}
    with pytest.raises(ValidationError, match="set restart_by: gtid"):
        MySqlConfig(database=database)
    with pytest.raises(ValidationError, match="database.host or database.hosts, not both"):
        MySqlConfig(database={**database, "host": "a"}, restart_by="gtid")
    with pytest.raises(ValidationError, match="not a server address"):
        MySqlConfig(database={**database, "hosts": ["a:port"]}, restart_by="gtid")
    source = MySqlConfig(database=database, restart_by="gtid").source_config("c")
    assert source.addresses == [("a", 3306), ("b", 3306)]
    assert MySqlConfig(database={"host": "x", "port": 7, "user": "u", "server_id": 9}
                       ).source_config("c").addresses == [("x", 7)]


def test_schema_history_recovers_by_gtid_set_across_servers():
    """Positions of another server mean nothing: recovered by GTID set, a DDL recorded on the old primary
    at a position 'after' the new server's is still applied, and one not yet executed is not."""
    history = SchemaHistory(MemoryHistoryStore())
    history.reset(BinlogPosition("binlog.000007", 100), f"{U}:1-10")
    history.record(BinlogPosition("binlog.000007", 100), "d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   gtids=f"{U}:1-10")
    history.record(BinlogPosition("binlog.000009", 500), "d", "ALTER TABLE d.t ADD COLUMN v INT",
                   gtids=f"{U}:1-11")
    history.record(BinlogPosition("binlog.000009", 900), "d", "ALTER TABLE d.t ADD COLUMN w INT",
                   gtids=f"{U}:1-12")
    on_the_new_server = BinlogPosition("binlog.000001", 4000)
    columns = [c.name for c in history.recover(on_the_new_server, f"{U}:1-11,{V}:1-3").get("d", "t").columns]
    assert columns == ["id", "v"]
    assert history.recover(BinlogPosition("binlog.000009", 600)).get("d", "t").columns[-1].name == "v"
