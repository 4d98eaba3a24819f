"""The sink's merge rules on change events written straight to the log (the connector's Debezium
format, with chosen binlog positions), so each rule is hit on purpose: several changes of one key in
one batch, an older change arriving late, a delete's tombstone, TRUNCATE, the changelog and SCD2
tables, and records the sink cannot apply."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from sink_harness import delta_rs_reads_the_same, run_sink

SERVER = "rules"


def event(op: str, before: dict | None, after: dict | None, pos: int, row: int = 0, snapshot: str = "false",
          table: str = "items", ts_ms: int | None = None) -> bytes:
    source = {"version": "binlake-0.1", "connector": "mysql", "name": SERVER, "server_id": 1, "file": "binlog.000001",
              "pos": pos, "gtid": None, "db": "shop", "table": table,
              "ts_ms": 1_700_000_000_000 + pos * 1000 if ts_ms is None else ts_ms, "snapshot": snapshot, "row": row}
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": 0, "source": source}).encode()


def schema_change(kind: str, pos: int, table: str = "items", columns=(("id", "int(11)"), ("name", "varchar(20)"),
                                                                       ("price", "decimal(10,2)")), key=("id",)) -> bytes:
    source = {"file": "binlog.000001", "pos": pos, "db": "shop", "table": table, "ts_ms": 1_700_000_000_000 + pos * 1000,
              "snapshot": "false", "row": 0}
    definition = {"primaryKeyColumnNames": list(key),
                  "columns": [{"name": n, "typeName": t.split("(")[0].upper(), "typeExpression": t} for n, t in columns]}
    return json.dumps({"source": source, "ts_ms": 0, "databaseName": "shop", "ddl": f"{kind} ...",
                       "tableChanges": [{"type": kind, "id": f"shop.{table}", "table": definition}]}).encode()


def produce(address: str, records: list[tuple[str, bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for topic, key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def item(id_: int, name: str, price: str = "1.00") -> dict:
    return {"id": id_, "name": name, "price": price}


def key(id_: int) -> bytes:
    return json.dumps({"id": id_}).encode()


TOPIC = f"{SERVER}.shop.items"


@pytest.fixture
def targets(tmp_path, postgres, request):
    schema = f"rules_{abs(hash(request.node.name)) % 10**8}"
    return {"delta": {"delta": {"path": str(tmp_path / "delta")}},
            "jdbc": {"jdbc": {"url": postgres.url, "user": "binlake", "schema": schema}}}


def sink(broker, tmp_path, target_kind: str, targets: dict, **extra) -> dict:
    return {"bootstrap_servers": broker.address, "topics": [TOPIC], "format": "debezium", "schema_topic": SERVER,
            "checkpoint": str(tmp_path / f"ck-{target_kind}"), "trigger": "available_now",
            "target": targets[target_kind], **extra}


def delta_rows(spark, tmp_path, suffix: str = "", live: bool = True) -> list[dict]:
    """The table's rows as Spark reads them, once delta-rs has read the same (issue 39)."""
    path = str(tmp_path / "delta" / "shop" / f"items{suffix}")
    df = spark.read.format("delta").load(path)
    if live and not suffix:
        df = df.where("NOT __deleted")
    rows = [r.asDict() for r in df.collect()]
    delta_rs_reads_the_same(path, rows, live_only=live and not suffix)
    return rows


def pg_rows(postgres, targets, table: str = "items") -> list[dict]:
    schema = targets["jdbc"]["jdbc"]["schema"]
    with postgres.connect() as conn:
        cur = conn.execute(f'SELECT * FROM "{schema}"."{table}"')
        return [dict(zip([d.name for d in cur.description], row)) for row in cur.fetchall()]


def by_id(rows: list[dict]) -> dict:
    return {r["id"]: (r["name"], str(r["price"]) if r["price"] is not None else None) for r in rows}


@pytest.mark.parametrize("target_kind", ["delta", "jdbc"])
def test_latest_change_wins_late_older_ones_lose_deletes_stay_deleted(spark, postgres, broker, tmp_path, targets,
                                                                      target_kind):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [  # one batch: several changes of key 1, a delete of key 2, a snapshot read of 3
        (TOPIC, key(3), event("r", None, item(3, "snap"), 150, snapshot="true")),
        (TOPIC, key(1), event("c", None, item(1, "a"), 200)),
        (TOPIC, key(1), event("u", item(1, "a"), item(1, "b"), 300)),
        (TOPIC, key(2), event("c", None, item(2, "x"), 310)),
        (TOPIC, key(1), event("u", item(1, "b"), item(1, "c", "9.99"), 400, row=1)),
        (TOPIC, key(2), event("d", item(2, "x"), None, 500)),
        (TOPIC, key(2), None),  # the tombstone after a delete
    ])
    config = sink(broker, tmp_path, target_kind, targets)
    run_sink(spark, config)
    read = (lambda: by_id(delta_rows(spark, tmp_path))) if target_kind == "delta" else (lambda: by_id(pg_rows(postgres, targets)))
    assert read() == {1: ("c", "9.99"), 3: ("snap", "1.00")}

    produce(broker.address, [  # late, older changes: they must not win, nor bring key 2 back
        (TOPIC, key(1), event("u", item(1, "a"), item(1, "stale"), 250)),
        (TOPIC, key(2), event("u", item(2, "x"), item(2, "resurrected"), 450)),
        (TOPIC, key(3), event("u", item(3, "snap"), item(3, "streamed"), 160)),  # after the snapshot read
    ])
    run_sink(spark, config)
    assert read() == {1: ("c", "9.99"), 3: ("streamed", "1.00")}


@pytest.mark.parametrize("target_kind", ["delta", "jdbc"])
def test_truncate_empties_the_table_in_order_with_the_changes(spark, postgres, broker, tmp_path, targets, target_kind):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(i), event("c", None, item(i, f"n{i}"), 200 + i)) for i in range(1, 4)])
    config = sink(broker, tmp_path, target_kind, targets)
    run_sink(spark, config)
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("TRUNCATE", 300))])
    produce(broker.address, [(TOPIC, key(4), event("c", None, item(4, "after"), 400)),
                             (TOPIC, key(1), event("u", item(1, "n1"), item(1, "before the truncate"), 250))])
    run_sink(spark, config)
    rows = delta_rows(spark, tmp_path) if target_kind == "delta" else pg_rows(postgres, targets)
    assert by_id(rows) == {4: ("after", "1.00")}


@pytest.mark.parametrize("target_kind", ["delta", "jdbc"])
def test_changelog_mode_keeps_every_change(spark, postgres, broker, tmp_path, targets, target_kind):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(1), event("c", None, item(1, "a"), 200)),
                             (TOPIC, key(1), event("u", item(1, "a"), item(1, "b"), 300)),
                             (TOPIC, key(1), event("d", item(1, "b"), None, 400))])
    config = sink(broker, tmp_path, target_kind, targets, mode="changelog")
    run_sink(spark, config)
    run_sink(spark, config)  # nothing new: nothing appended twice
    rows = delta_rows(spark, tmp_path, "__changelog") if target_kind == "delta" else pg_rows(postgres, targets, "items__changelog")
    assert sorted((r["__op"], r["name"]) for r in rows) == [("c", "a"), ("d", None), ("u", "b")]
    current = delta_rows(spark, tmp_path) if target_kind == "delta" else pg_rows(postgres, targets)
    assert current == []


@pytest.mark.parametrize("target_kind", ["delta", "jdbc"])
def test_scd2_history_closes_versions_and_places_late_changes(spark, postgres, broker, tmp_path, targets, target_kind):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(1), event("c", None, item(1, "v1"), 200)),
                             (TOPIC, key(1), event("u", item(1, "v1"), item(1, "v3"), 400))])
    config = sink(broker, tmp_path, target_kind, targets, mode="scd2")
    run_sink(spark, config)
    produce(broker.address, [(TOPIC, key(1), event("u", item(1, "v1"), item(1, "v2"), 300)),  # late: between v1 and v3
                             (TOPIC, key(1), event("d", item(1, "v3"), None, 500))])
    run_sink(spark, config)
    rows = delta_rows(spark, tmp_path, "__history") if target_kind == "delta" else pg_rows(postgres, targets, "items__history")
    versions = sorted(rows, key=lambda r: r["__seq"])
    assert [(r["name"], r["__op"], r["__is_current"]) for r in versions] == [
        ("v1", "c", False), ("v2", "u", False), ("v3", "u", False), (None, "d", False)]
    assert [r["__end_at"] for r in versions[:-1]] == [r["__start_at"] for r in versions[1:]]
    assert versions[-1]["__end_at"] is None


@pytest.mark.parametrize("mode", ["current", "changelog", "scd2"])
def test_rows_a_retried_task_staged_twice_are_applied_once(spark, postgres, broker, tmp_path, targets, monkeypatch,
                                                           mode):
    """On a cluster, an executor lost after a partition's JDBC commit but before the driver heard of it
    makes Spark run the task again, which stages the partition's rows a second time. The retry is
    injected here (every batch's staged rows doubled after the JDBC write): local mode loses no
    executor, and none can be killed between that commit and its report."""
    from psycopg import sql

    from spark_sink.postgres_target import STAGE, PostgresTables, ident

    stage = PostgresTables._stage

    def staged_twice(self, conn, batches, batch_id):
        stage(self, conn, batches, batch_id)
        conn.execute(sql.SQL("INSERT INTO {0} SELECT * FROM {0} WHERE __batch = %s").format(
            ident(self.schema, STAGE)), (batch_id,))

    monkeypatch.setattr(PostgresTables, "_stage", staged_twice)
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(1), event("c", None, item(1, "a"), 200)),
                             (TOPIC, key(2), event("c", None, item(2, "b"), 210)),
                             (TOPIC, key(1), event("u", item(1, "a"), item(1, "a2"), 300))])
    config = sink(broker, tmp_path, "jdbc", targets, mode=mode)
    run_sink(spark, config)
    produce(broker.address, [(TOPIC, key(2), event("d", item(2, "b"), None, 400))])
    run_sink(spark, config)
    assert by_id(pg_rows(postgres, targets)) == {1: ("a2", "1.00")}
    if mode != "current":  # every change once: four
        extra = pg_rows(postgres, targets, "items__changelog" if mode == "changelog" else "items__history")
        assert sorted(r["__seq"] for r in extra) == sorted({r["__seq"] for r in extra}) and len(extra) == 4


def test_a_staging_table_that_held_rows_as_json_is_made_again(spark, postgres, broker, tmp_path, targets):
    """Earlier versions staged each row as jsonb; what such a table still holds is an unfinished batch's,
    which its replay stages again, so the sink makes the table again in today's form and applies the batch."""
    schema = targets["jdbc"]["jdbc"]["schema"]
    postgres.sql(f'CREATE SCHEMA "{schema}"',
                 f'CREATE UNLOGGED TABLE "{schema}"._binlake_stage (__table text NOT NULL, __batch bigint NOT NULL, '
                 f'row jsonb NOT NULL)',
                 f"""INSERT INTO "{schema}"._binlake_stage VALUES ('items', 0, '{{"id": 1}}')""")
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100)),
                             (TOPIC, key(1), event("c", None, item(1, "a"), 200))])
    run_sink(spark, sink(broker, tmp_path, "jdbc", targets))
    assert by_id(pg_rows(postgres, targets)) == {1: ("a", "1.00")}
    assert postgres.sql(f"""SELECT data_type FROM information_schema.columns WHERE table_schema = '{schema}'
                            AND table_name = '_binlake_stage' AND column_name = 'row'""") == [("ARRAY",)]


@pytest.mark.parametrize("type_widening", ["rewrite", pytest.param("feature", marks=pytest.mark.slow)])  # (the option: -m slow)
def test_a_widened_column_is_widened_in_delta_by_rewrite_for_every_reader_or_in_place_by_the_feature(
        spark, broker, tmp_path, targets, type_widening):
    """MySQL widens id to BIGINT and price to DECIMAL(14,2): by default (`rewrite`) the table's files are
    rewritten with the columns cast, and delta-rs still reads the table and its changelog; with
    `type_widening: feature` Delta's type-widening feature does it in place, and the table then
    requires that feature of every reader."""
    import deltalake

    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(i), event("c", None, item(i, f"n{i}"), 200 + i)) for i in range(1, 4)])
    targets["delta"]["delta"]["type_widening"] = type_widening
    config = sink(broker, tmp_path, "delta", targets, mode="changelog")
    run_sink(spark, config)
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change(
        "ALTER", 300, columns=(("id", "bigint(20)"), ("name", "varchar(20)"), ("price", "decimal(14,2)"))))])
    produce(broker.address, [(TOPIC, key(1), event("u", item(1, "n1"), {"id": 1, "name": "big", "price": "123456789012.34"}, 400)),
                             (TOPIC, key(9), event("c", None, {"id": 9_000_000_000, "name": "wide", "price": "1.00"}, 500))])
    run_sink(spark, config)
    path = str(tmp_path / "delta" / "shop" / "items")
    types = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    assert (types["id"], types["price"]) == ("bigint", "decimal(14,2)")
    protocols = [json.loads(line)["protocol"] for commit in sorted((tmp_path / "delta" / "shop" / "items" / "_delta_log")
                                                                   .glob("*.json"))
                 for line in commit.read_text().splitlines() if line.startswith('{"protocol"')]
    features = set(protocols[-1].get("readerFeatures") or ())  # (read from the log: delta-rs may refuse the table)
    if type_widening == "rewrite":
        assert by_id(delta_rows(spark, tmp_path)) == {1: ("big", "123456789012.34"), 2: ("n2", "1.00"),
                                                      3: ("n3", "1.00"), 9_000_000_000: ("wide", "1.00")}
        assert len(delta_rows(spark, tmp_path, "__changelog")) == 5
        assert "typeWidening" not in features
    else:
        rows = [r.asDict() for r in spark.read.format("delta").load(path).where("NOT __deleted").collect()]
        assert sorted(r["id"] for r in rows) == [1, 2, 3, 9_000_000_000]
        assert "typeWidening" in features
        with pytest.raises(Exception, match="reader features: {.typeWidening.} but these are not yet supported"):
            deltalake.DeltaTable(path).to_pyarrow_table()  # (what the docs warn of)


def test_records_the_sink_cannot_apply_stop_it_with_their_place_or_go_to_dead_letters(spark, broker, tmp_path, targets):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(1), event("c", None, item(1, "fine"), 200)),
                             (TOPIC, b"x", b"this is not JSON"),
                             (TOPIC, key(2), event("c", None, {"id": 2, "name": "bad price", "price": "abc"}, 300))])
    with pytest.raises(Exception, match=r"topic rules.shop.items, partition 0, offset 1: not a Debezium change event"):
        run_sink(spark, sink(broker, tmp_path, "delta", targets))
    run_sink(spark, sink(broker, tmp_path, "delta", targets, errors={"tolerance": "all"}))
    assert by_id(delta_rows(spark, tmp_path)) == {1: ("fine", "1.00")}
    dead = spark.read.format("delta").load(str(tmp_path / "delta" / "_dead_letter")).collect()
    assert sorted(r.offset for r in dead) == [1, 2]
    assert any("column price: a value does not fit decimal(10,2)" in r.reason for r in dead)


def test_a_table_without_a_primary_key_or_with_a_type_too_wide_is_refused_by_name(spark, broker, tmp_path, targets):
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100, key=()))])
    produce(broker.address, [(TOPIC, key(1), event("c", None, item(1, "a"), 200))])
    with pytest.raises(Exception, match="table shop.items has no primary key"):
        run_sink(spark, sink(broker, tmp_path, "delta", targets))
    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change(
        "ALTER", 300, columns=(("id", "int(11)"), ("name", "varchar(20)"), ("price", "decimal(65,2)"))))])
    with pytest.raises(Exception, match=r"table shop.items: DECIMAL\(65,2\) has more than the 38 digits"):
        run_sink(spark, sink(broker, tmp_path, "delta", targets, checkpoint=str(tmp_path / "ck2")))


@pytest.mark.parametrize("target_kind", ["delta", "jdbc"])
def test_metrics_count_batches_rows_the_offsets_left_behind_and_each_tables_freshness(spark, broker, tmp_path,
                                                                                       targets, target_kind):
    """Served as `binlake sink run --prometheus-listener` serves them, scraped over HTTP. Freshness:
    the changes say they were committed in MySQL now (shop.orders' 30 s ago), so each table's
    quantiles lie between the time from that commit to the query's start and to its end; the
    snapshot read, stamped years ago, is no commit and must not count. Each target times its own
    commit (Delta's version, PostgreSQL's transaction), so both are checked."""
    from common.prometheus import serve_in_thread
    from prometheus_scrape import sample, scrape
    from spark_sink import metrics
    from spark_sink.config import validate
    from spark_sink.job import SinkJob

    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100)),
                             (SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 101, table="orders"))])
    committed = time.time()
    now_ms, behind_s = int(committed * 1000), {"shop.items": 0, "shop.orders": 30}
    produce(broker.address, [(TOPIC, key(9), event("r", None, item(9, "old"), 150, snapshot="true"))]
            + [(TOPIC, key(i), event("c", None, item(i, f"n{i}"), 200 + i, ts_ms=now_ms)) for i in range(6)]
            + [(TOPIC, key(i), event("c", None, item(i, f"o{i}"), 300 + i, table="orders", ts_ms=now_ms - 30_000))
               for i in range(2)])  # (one topic for both: the sink takes the table from each event)
    name = f"binlake-sink-metered-{target_kind}"
    started = time.time()
    query = SinkJob(spark, validate(sink(broker, tmp_path, target_kind, targets, max_offsets_per_trigger=5))).start(name)
    query.awaitTermination()
    ended = time.time()
    url = serve_in_thread(metrics.REGISTRY, "127.0.0.1:0")
    samples = scrape(url)
    assert sample(samples, "binlake_sink_rows_total", query=name, table="shop.items") == 7
    assert sample(samples, "binlake_sink_rows_total", query=name, table="shop.orders") == 2
    batches = sample(samples, "binlake_sink_batches_total", query=name)
    assert batches == 2  # nine records, five per trigger (each batch of a Delta table: seconds)
    for phase in metrics.PHASES:
        assert sample(samples, "binlake_sink_batch_seconds_count", query=name, phase=phase) == batches
    for table, behind in behind_s.items():
        p50, p99 = (sample(samples, "binlake_sink_freshness_seconds", query=name, table=table, quantile=q)
                    for q in ("0.5", "0.99"))
        assert started - committed + behind <= p50 <= p99 <= ended - committed + behind + 0.001, (table, p50, p99)
    metrics.progress(name, query.recentProgress[0])  # the first batch: four records still to come
    assert sample(scrape(url), "binlake_sink_offsets_behind", query=name) == 4
    metrics.progress(name, query.lastProgress)
    assert sample(scrape(url), "binlake_sink_offsets_behind", query=name) == 0


def test_queries_of_one_app_merge_at_once_each_with_its_own_idempotent_identity(spark, broker, tmp_path, targets):
    """Several configs run as queries of one Spark application (`binlake sink run a.yaml b.yaml`). Each
    MERGE commit must carry its own query's identity (txnAppId = the query's id, txnVersion = the batch),
    however the two queries' merges interleave: without it, a replayed batch is merged again. Three batches
    each: a batch's MERGE takes seconds, so the two queries' merges overlap from the first."""
    from spark_sink.config import validate
    from spark_sink.job import run

    produce(broker.address, [(SERVER, b'{"databaseName":"shop"}', schema_change("CREATE", 100))])
    produce(broker.address, [(TOPIC, key(i), event("c", None, item(i, f"n{i}"), 200 + i)) for i in range(3)])
    configs = {name: validate(sink(broker, tmp_path, name, {name: {"delta": {"path": str(tmp_path / name)}}},
                                   max_offsets_per_trigger=1)) for name in ("left", "right")}
    assert run(configs) == 0
    for name in configs:
        query_id = json.loads((tmp_path / f"ck-{name}" / "metadata").read_text())["id"]
        merges = []
        for commit in sorted((tmp_path / name / "shop" / "items" / "_delta_log").glob("*.json")):
            actions = [json.loads(line) for line in commit.read_text().splitlines()]
            if any(a.get("commitInfo", {}).get("operation") == "MERGE" for a in actions):
                merges.append(next((a["txn"] for a in actions if "txn" in a), None))
        assert [(t or {}).get("appId") for t in merges] == [query_id] * 3, name
        versions = [t["version"] for t in merges]
        assert versions == sorted(set(versions)), name
        rows = spark.read.format("delta").load(str(tmp_path / name / "shop" / "items")).where("NOT __deleted")
        assert sorted(r.id for r in rows.select("id").collect()) == list(range(3)), name
