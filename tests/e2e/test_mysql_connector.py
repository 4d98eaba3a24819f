"""The mysql connector end to end: `binlake connect run` (a subprocess) against a throwaway server and a
real broker, events read back with a read_committed aiokafka consumer. Every test runs against MySQL (at
its defaults: minimal row metadata, GTIDs) and MariaDB (the `server` fixture); two whose behaviour is past the
source run on MySQL with -m slow."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from prometheus_scrape import endpoint, scrape

from sql_fixtures import by_default_on
from e2e_harness import ROOT, mysql_config, mysql_rows, read_committed, replay, same_rows, wait_until, write_config


async def messages(address: str, topic: str) -> list:
    try:
        return await read_committed(address, [topic])
    except AssertionError:  # not created yet
        return []


async def topics(address: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def cleanup_policy(address: str, topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=address)
    await admin.start()
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})])
        return {e[0]: e[1] for r in response.resources for e in r[4]}["cleanup.policy"]
    finally:
        await admin.close()


async def test_example_shop_yaml_snapshot_then_streaming(server, broker, connector):
    server.sql("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(20), qty INT)",
                "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(20))",
                "INSERT INTO shop.orders VALUES (1, 'pen', 2), (2, 'ink', 1), (3, 'pad', 5)",
                "INSERT INTO shop.customers VALUES (7, 'ann')",
                "CREATE DATABASE elsewhere", "CREATE TABLE elsewhere.t (id INT PRIMARY KEY)")
    env = {"MYSQL_PASSWORD": server.password, "MYSQL_PORT": str(server.port), "BOOTSTRAP_SERVERS": broker.address}
    running = connector(ROOT / "examples" / "shop.yaml", env)
    address = broker.address

    async def snapshot_landed():
        return len(await messages(address, "shop.shop.orders")) == 3
    await wait_until(snapshot_landed, 60, "the snapshot of shop.orders")

    server.sql("BEGIN", "INSERT INTO shop.orders VALUES (4, 'cap', 1)", "UPDATE shop.orders SET qty = 3 WHERE id = 1",
                "DELETE FROM shop.orders WHERE id = 2", "UPDATE shop.orders SET id = 30 WHERE id = 3", "COMMIT",
                "INSERT INTO shop.customers VALUES (8, 'bob')", "INSERT INTO elsewhere.t VALUES (1)",
                "ALTER TABLE shop.orders ADD COLUMN note VARCHAR(10)", "INSERT INTO shop.orders VALUES (5, 'mug', 1, 'gift')")

    async def streamed():
        return same_rows(replay(await messages(address, "shop.shop.orders")), mysql_rows(server, "shop.orders"))
    await wait_until(streamed, 30, "the streamed changes of shop.orders")
    orders = await messages(address, "shop.shop.orders")
    ops = [(m.data["op"], m.data["after"] or m.data["before"]) if m.data else ("tombstone", json.loads(m.key))
           for m in orders]
    assert [(op, row["id"]) for op, row in ops] == [
        ("r", 1), ("r", 2), ("r", 3),
        ("c", 4), ("u", 1), ("d", 2), ("tombstone", 2), ("d", 3), ("tombstone", 3), ("c", 30), ("c", 5)]
    assert ops[-1][1] == {"id": 5, "item": "mug", "qty": 1, "note": "gift"}
    streamed_txn = {m.data["transaction"]["id"] for m in orders[3:10] if m.data}
    assert len(streamed_txn) == 1                       # the multi-statement transaction is one transaction id
    assert [m.data["after"]["id"] for m in await messages(address, "shop.shop.customers")] == [7, 8]
    assert "shop.elsewhere.t" not in await topics(address)   # tables: include 'shop\..*' only

    schema = [m.data for m in await messages(address, "shop")]
    assert [c["tableChanges"][0]["id"] for c in schema[:2]] == ["shop.customers", "shop.orders"]  # snapshot
    assert schema[-1]["ddl"] == "ALTER TABLE shop.orders ADD COLUMN note VARCHAR(10)"
    history = [json.loads(m.value) for m in await messages(address, "shop.schema-history")]
    assert history[0]["reset"] and history[-1]["ddl"] == "ALTER TABLE shop.orders ADD COLUMN note VARCHAR(10)"
    assert await cleanup_policy(address, "shop.schema-history") == "compact"
    assert running.terminate() == 0, running.log()[-3000:]

    # A restart resumes after the last committed position, with the table shapes from the history topic.
    resumed = connector(ROOT / "examples" / "shop.yaml", env)
    server.sql("INSERT INTO shop.orders VALUES (6, 'box', 2, 'late')")

    async def resumed_streaming():
        return len(await messages(address, "shop.shop.orders")) == len(orders) + 1
    await wait_until(resumed_streaming, 30, "the event written after the restart")
    await asyncio.sleep(1)                              # room for anything repeated to show up
    after = await messages(address, "shop.shop.orders")
    assert len(after) == len(orders) + 1 and after[-1].data["after"] == {"id": 6, "item": "box", "qty": 2, "note": "late"}
    assert "shop-0 started (exactly_once, 1 stored offset(s))" in resumed.log()
    assert resumed.terminate() == 0


async def test_canal_format_with_include_and_exclude_filters(server, broker, connector, tmp_path):
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.keep (id INT PRIMARY KEY, v VARCHAR(10))",
               f"CREATE TABLE `{db}`.skip (id INT PRIMARY KEY)",
                f"INSERT INTO `{db}`.keep VALUES (1, 'a')", f"INSERT INTO `{db}`.skip VALUES (1)")
    config = mysql_config("flat", broker, server, [rf"{db}\..*"], format="canal", snapshot="initial",
                          tables={"include": [rf"{db}\..*"], "exclude": [rf"{db}\.skip"]})
    running = connector(write_config(tmp_path / "flat.yaml", **config))
    topic = f"flat.{db}.keep"

    async def snapshot_landed():
        return await messages(broker.address, topic)
    await wait_until(snapshot_landed, 60, "the snapshot")
    server.sql(f"UPDATE `{db}`.keep SET v = 'b' WHERE id = 1", f"INSERT INTO `{db}`.skip VALUES (2)",
                f"DELETE FROM `{db}`.keep WHERE id = 1", f"ALTER TABLE `{db}`.keep ADD COLUMN w INT")

    async def streamed():
        found = await messages(broker.address, topic)
        return found if len(found) >= 5 else None
    found = await wait_until(streamed, 30, "canal messages")
    flat = [m.data for m in found]
    assert [(m["type"], m["isDdl"]) for m in flat] == [("CREATE", True), ("INSERT", False), ("UPDATE", False),
                                                         ("DELETE", False), ("ALTER", True)]
    assert flat[2]["data"] == [{"id": "1", "v": "b"}] and flat[2]["old"] == [{"v": "a"}]
    assert flat[2]["pkNames"] == ["id"] and flat[2]["database"] == db and flat[2]["table"] == "keep"
    assert [m.key for m in found[1:4]] == [b'{"id":1}'] * 3 and found[4].key is None   # no tombstones in canal
    assert f"flat.{db}.skip" not in await topics(broker.address)
    assert running.terminate() == 0


async def test_binlog_off_is_reported_and_the_run_fails(server_factory, server_kind, broker, connector, tmp_path):
    # no binlog (MySQL writes one unless told not to, MariaDB only with --log-bin)
    server = server_factory(**({"skip_log_bin": None} if server_kind == "mysql" else {}))
    running = connector(write_config(tmp_path / "c.yaml", **mysql_config("nolog", broker, server, [r"x\..*"])))
    assert running.wait(60) == 1
    assert ("nolog-0 failed and will not be restarted: binary logging is off on the server: start it with --log-bin "
            "(log_bin=ON) and --server-id, then restart the source") in running.log()


async def test_wrong_password_is_reported_and_the_run_fails(server, broker, connector, tmp_path):
    config = mysql_config("badpw", broker, server, [r"x\..*"])
    config["database"]["password"] = "not-the-password"
    running = connector(write_config(tmp_path / "c.yaml", **config))
    assert running.wait(60) == 1
    log = running.log()
    assert f"badpw-0 failed and will not be restarted: MySQL at 127.0.0.1:{server.port} refused user 'cdc': " in log
    assert "Access denied for user 'cdc'" in log and "check database.user and database.password" in log
    assert "not-the-password" not in log


async def test_config_errors_list_every_wrong_key_with_its_path(connector, tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text("name: shop\nconnector: mysql\nbootstrap_servers: 127.0.0.1:9\n"
                    "database: {host: 127.0.0.1, prot: 3306, user: cdc, password: '${NO_SUCH_PASSWORD}'}\n"
                    "tables: {include: ['shop\\..(*'], exclde: []}\nsnapshot: inital\nformat: canal\n")
    running = connector(path)
    assert running.wait(30) == 2
    log = running.log()
    assert f"{path}: 6 problems" in log
    for line in ("database.password: environment variable NO_SUCH_PASSWORD is not set",
                 "database.server_id: required key is missing",
                 "database.prot: unknown key; did you mean 'port'?",
                 "tables.include: 'shop\\\\..(*' is not a regular expression",
                 "tables.exclde: unknown key; did you mean 'exclude'?",
                 "snapshot: Input should be 'initial', 'initial_only', 'when_needed', 'no_data' or 'always' (got 'inital')"):
        assert line in log, log


@by_default_on("mariadb")    # (the connector groups them past the source, alike for either server)
async def test_a_backlog_of_small_transactions_is_grouped_into_few_kafka_transactions(server, broker, connector,
                                                                                    tmp_path):
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    config = write_config(tmp_path / "g.yaml", **mysql_config("grouped", broker, server, [rf"{db}\.t"],
                                                               snapshot="no_data"))
    first = connector(config)

    async def structure_recorded():
        return await offsets(broker.address, "grouped")
    await wait_until(structure_recorded, 60, "the structure snapshot's offset")
    assert first.terminate() == 0
    commits_before = len(await offsets(broker.address, "grouped"))
    server.sql(*(f"INSERT INTO `{db}`.t VALUES ({i})" for i in range(300)))   # 300 autocommit transactions
    connector(config)

    async def caught_up():
        return len(await messages(broker.address, f"grouped.{db}.t")) == 300
    await wait_until(caught_up, 60, "300 events")
    events = [m.data for m in await messages(broker.address, f"grouped.{db}.t")]
    assert [e["after"]["id"] for e in events] == list(range(300))
    assert len({e["transaction"]["id"] for e in events}) == 300        # each its own MySQL transaction...
    commits = len(await offsets(broker.address, "grouped")) - commits_before
    assert commits < 100, commits                                     # ...but far fewer Kafka transactions


async def offsets(address: str, name: str) -> list[dict]:
    """The connector's offset records, one per committed Kafka transaction."""
    return [json.loads(m.value) for m in await messages(address, "binlake-offsets")
            if json.loads(m.key)[0] == name and m.value is not None]


async def test_metrics_show_the_snapshot_rows_and_the_binlog_lag(server, broker, connector, tmp_path):
    db = server.new_database()
    server.sql("CREATE TABLE t (id INT PRIMARY KEY)",
               "INSERT INTO t VALUES " + ", ".join(f"({i})" for i in range(1, 501)), db=db)
    config = write_config(tmp_path / "m.yaml", **mysql_config("metered", broker, server, [rf"{db}\.t"]))
    running = connector(config, args=("--prometheus-listener", "127.0.0.1:0"))

    async def serving():
        return endpoint(running.log())
    url = await wait_until(serving, 30, "the metrics endpoint")
    task = (("connector", "metered"), ("task", "0"))

    def scrape_task() -> dict[str, float]:
        return {name: value for (name, labels), value in scrape(url).items() if labels == task}

    async def caught_up():  # a heartbeat after the snapshot: nothing more waits on the server
        found = await asyncio.to_thread(scrape_task)
        return found if found.get("binlake_connect_source_binlog_lag_seconds") == 0 \
            and found.get("binlake_connect_source_binlog_lag_bytes") == 0 else None
    samples = await wait_until(caught_up, 60, "the stream to catch up")
    assert samples["binlake_connect_source_snapshot_rows_read"] == 500
    assert samples["binlake_connect_source_snapshot_tables_done"] == samples[
        "binlake_connect_source_snapshot_tables_total"] == 1
    assert samples["binlake_connect_source_snapshot_rows_estimated"] > 0  # MySQL's estimate, not exact
    assert samples["binlake_connect_records_total"] >= 500

    server.sql(f"INSERT INTO `{db}`.t VALUES (1001), (1002)", f"INSERT INTO `{db}`.t VALUES (1003)")

    async def streamed():
        found = await asyncio.to_thread(scrape_task)
        return found if found["binlake_connect_records_total"] >= samples["binlake_connect_records_total"] + 3 else None
    after = await wait_until(streamed, 60, "three streamed rows counted")
    assert after["binlake_connect_source_transactions_total"] >= samples["binlake_connect_source_transactions_total"] + 2


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(child) for child in f.read().split()]
    return found


def source_process(connector_pid: int) -> int:
    """The pid of the connector's source process (cdc/source_process.py): a child of the fork server
    the connect process started."""
    [server] = [pid for pid in children(connector_pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    [source] = children(server)
    return source


@by_default_on("mariadb")    # (the runtime restarts the task; the restart on each server: the shop.yaml test)
async def test_a_killed_source_process_restarts_the_task_and_nothing_is_lost_or_repeated(server, broker, connector,
                                                                                      tmp_path):
    db = server.new_database()
    server.sql(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    config = write_config(tmp_path / "k.yaml", **mysql_config("killed", broker, server, [rf"{db}\.t"]))
    running = connector(config)
    server.sql(*(f"INSERT INTO `{db}`.t VALUES ({i})" for i in range(100)))

    async def events(count: int):
        return len(await messages(broker.address, f"killed.{db}.t")) >= count
    await wait_until(lambda: events(100), 60, "the first 100 events")
    os.kill(source_process(running.proc.pid), signal.SIGKILL)
    server.sql(*(f"INSERT INTO `{db}`.t VALUES ({i})" for i in range(100, 200)))
    await wait_until(lambda: events(200), 60, "200 events after the source process was killed")
    assert [m.data["after"]["id"] for m in await messages(broker.address, f"killed.{db}.t")] == list(range(200))
    assert "the source process exited unexpectedly" in running.log()
    assert running.proc.poll() is None   # the task restarted; the connector runs on
