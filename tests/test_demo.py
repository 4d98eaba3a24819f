"""`binlake demo` end to end: a throwaway MariaDB (or, with --mysql, Oracle MySQL at its defaults),
ZooKeeper and three brokers (or one broker alone), the mysql connector, two faust processor workers, the
Spark sink and a throwaway PostgreSQL, run by the real command in a subprocess; its output must show events
of every table, a summary where the change log matches the source server with the counts the workload
implies, the processors' outputs and the sink's batches, and a closing table where Delta, PostgreSQL and
the derived tables equal what the server holds. Nothing may be left behind, even when the demo is
SIGKILLed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerproc import ROOT
from prometheus_scrape import scrape

# table -> (rows in MySQL, events r/c/u/d, ddl) after the demo's snapshot and workload (binlake/demo/shop.py)
EXPECTED = {
    "debezium": {"shop.customers": ("4", "3/1/1/0", "1"), "shop.orders": ("5", "0/6/4/1", "2"),
                 "shop.products": ("3", "3/1/1/1", "1")},
    # Canal has no snapshot op: snapshot rows are INSERTs
    "canal": {"shop.customers": ("4", "0/4/1/0", "1"), "shop.orders": ("5", "0/6/4/1", "2"),
              "shop.products": ("3", "0/4/1/1", "1")},
}


DEMO = [sys.executable, "-m", "binlake.cli", "demo"]
ENV = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}      # rows unclipped, lines as they come


def as_from_a_terminal() -> None:
    """preexec_fn: Ctrl-C's default action back (pytest-xdist's workers ignore SIGINT, and a child
    inherits an ignored signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_demo(*args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([*DEMO, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=ENV)
    return result, time.monotonic() - started


def work_dir(output: str) -> Path:
    return Path(re.search(r"files in (/\S+)", output).group(1))


def postgres_dir(output: str) -> Path:
    """What the demo's PostgreSQL keeps: as root, a directory of its own under the system's temp
    directory (the postgres user cannot reach the demo's), so outside `work_dir`."""
    return Path(re.search(r"PostgreSQL .*data in (/\S+)\)", output).group(1)).parent


def processes_using(directory: Path) -> list[str]:
    """Command lines of the processes that mention `directory` (mariadbd's datadir, the brokers', the
    connector's config) or run in it (the faust workers, the sink and its JVM)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if str(directory) in args or cwd.startswith(str(directory)):
            found.append(args)
    return found


def check_output(out: str, fmt: str, brokers: str, server: str = "MariaDB") -> None:
    assert re.search(rf"^binlake demo: {server} → ", out, re.M)
    if brokers == "cluster":
        assert re.search(r"^ZooKeeper +127\.0\.0\.1:", out, re.M)
        assert [int(n) for n in re.findall(r"^broker (\d) +127\.0\.0\.1:", out, re.M)] == [0, 1, 2]
        assert "✖ killed broker-1 (SIGKILL)" in out
    else:
        assert re.search(r"^broker +127\.0\.0\.1:", out, re.M) and "killed" not in out
    for table in ("customers", "products", "orders"):
        assert re.search(rf"^  shop\.shop\.{table} +c ", out, re.M), f"no insert event of {table}"
        assert re.search(rf"^  shop\.shop\.{table} +u ", out, re.M), f"no update event of {table}"
    assert re.search(r"^  shop\.shop\.orders +d +2 ", out, re.M)            # the delete
    assert re.search(r"^  shop\.shop\.products +d +MUG-01 ", out, re.M)     # the primary-key change:
    assert re.search(r"^  shop\.shop\.products +c +MUG-02 ", out, re.M)     # delete old key, create new one
    assert re.search(r"ddl +ALTER TABLE orders ADD COLUMN gift_note", out), "\n".join(  # (what DDL it showed)
        line for line in out.splitlines() if " ddl " in line or "ALTER" in line or "killed" in line)
    assert "gift_note='happy birthday'" in out                             # the row after the ALTER
    for table, (rows, ops, ddl) in EXPECTED[fmt].items():
        assert re.search(rf"^ +{re.escape(table)} +{rows} +{ops} +{ddl} +{rows} +yes", out, re.M), table
    assert f"the log matches {server}" in out
    # the processors' derived events, read back from the log
    assert re.search(r"^  derived\.shop\.orders_enriched +c +6 .*customer_name='Ada Lovelace'", out, re.M)
    assert re.search(r"^  derived\.shop\.high_value_orders +c +6 ", out, re.M)      # 59.70 >= 20
    assert re.search(r"^  derived\.shop\.revenue_per_minute +u +TEE-01,", out, re.M)
    # the sink's batches, one line per batch of each of its three queries
    for query in ("shop-delta", "shop-postgres", "derived-delta"):
        assert re.search(rf"^  binlake-sink-{query} batch \d+: ", out, re.M), query
    # the closing table: every table with its rows and checksum, equal everywhere
    for table, rows in (("shop.customers", 4), ("shop.products", 3), ("shop.orders", 5)):
        assert re.search(rf"^ +{re.escape(table)} +{rows} · (\w{{8}}) +{rows} · \1 +{rows} · \1 +yes", out, re.M), table
    for table, rows in (("derived.orders_enriched", 5), ("derived.high_value_orders", 2),
                        ("derived.revenue_per_minute", 2)):     # revenue: TEE-01 and MUG-02 (MUG-01's cancels out)
        assert re.search(rf"^ +{re.escape(table)} +{rows} · (\w{{8}}) +{rows} · \1 +yes", out, re.M), table
    assert f"Delta and PostgreSQL match {server}" in out


@pytest.mark.slow
def test_demo_on_one_broker_in_canal_format():
    result, _ = run_demo("--format", "canal", "--single-broker")
    assert result.returncode == 0, result.stdout + result.stderr
    check_output(result.stdout, "canal", "single")
    assert not work_dir(result.stdout).exists()


@pytest.mark.slow         # (2.5 minutes on 2 cores, 3-4 under load: the default suite is near its 20)
@pytest.mark.timeout(600)
def test_on_mysql_at_its_defaults_the_whole_pipeline_matches_it():
    """--mysql: the default demo (three brokers, one SIGKILLed halfway; Debezium) from Oracle MySQL as it
    is deployed (minimal row metadata, caching_sha2_password) with GTIDs on, which the demo shows as the
    server reports it."""
    result, _ = run_demo("--mysql", timeout=570)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^MySQL +127\.0\.0\.1:\d+  \(binlog_format=ROW binlog_row_image=FULL binlog_row_metadata=MINIMAL "
                     r"gtid_mode=ON; data in ", out, re.M), out.splitlines()[:3]
    check_output(out, "debezium", "cluster", server="MySQL")
    assert not work_dir(out).exists()


@pytest.mark.timeout(600)  # (1.5 minutes on a quiet machine; Spark's start alone takes minutes under load)
def test_the_whole_pipeline_matches_mariadb_then_keep_leaves_it_running_until_sigterm():
    """The default demo (three brokers, one SIGKILLed halfway; Debezium) with --keep: once the closing table
    matched, the pieces stay reachable as printed; SIGTERM then stops them all and removes the files."""
    proc = subprocess.Popen([*DEMO, "--keep"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=ENV)
    out = rest = ""
    try:
        for line in proc.stdout:
            out += line
            if line.startswith("  logs "):       # the last line of the instructions
                break
        assert "Left running" in out, out
        check_output(out, "debezium", "cluster")
        directory = work_dir(out)
        broker = re.search(r"binlake consume --bootstrap-server (\S+) --topic (\S+)", out)
        consumed = subprocess.run([sys.executable, "-m", "binlake.cli", "consume", "--bootstrap-server",
                                   broker.group(1), "--topic", broker.group(2), "--from-beginning",
                                   "--timeout-ms", "3000"], capture_output=True, text=True, timeout=60)
        assert consumed.stdout.count('"op":"c"') == 6      # orders 1 to 6, read back from the kept cluster
        psql = re.search(r"Postgres +(psql .*)$", out, re.M).group(1)
        rows = subprocess.run(psql + " -At", shell=True, capture_output=True, text=True, timeout=60)
        assert rows.returncode == 0 and len(rows.stdout.splitlines()) == 5, rows.stdout + rows.stderr
        metrics = dict((name, url) for url, name in re.findall(r"^ +(?:metrics +)?(http://\S+/metrics)  \((\S+)\)$",
                                                              out, re.M))
        assert set(metrics) == {"broker-0", "broker-2", "sink", "connector", "processor-0", "processor-1"}, out
        scraped = {name: scrape(url) for name, url in metrics.items()}
        for name, sample_name in (("connector", "binlake_connect_records_total"), ("sink", "binlake_sink_rows_total"),
                                  ("broker-0", "binlake_broker_messages_in_total")):
            assert sum(v for (n, _labels), v in scraped[name].items() if n == sample_name) > 0, name
        assert sum(v for name in ("processor-0", "processor-1") for (n, _labels), v in scraped[name].items()
                   if n == "binlake_streams_total_events_total") > 0
        dashboard = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
        asked = {name for panel in dashboard["panels"] for target in panel["targets"]
                 for name in re.findall(r"binlake_\w+", target["expr"])}
        exported = {n for samples in scraped.values() for n, _labels in samples}
        assert asked <= exported, asked - exported  # every series the example dashboard draws
        assert processes_using(directory)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + rest
    assert not directory.exists()
    assert processes_using(directory) == []


@pytest.mark.slow  # a crash variant (20-30 s): the stop by Ctrl-C while events stream runs by default
def test_a_sigkilled_demo_takes_every_child_with_it():
    """Nothing can clean up after SIGKILL, but every server and worker the demo started dies with it
    (PR_SET_PDEATHSIG), the JVMs and PostgreSQL (whose data is outside the demo's directory) included;
    only the files stay, and the test removes both."""
    proc = subprocess.Popen(DEMO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV)
    seen = ""
    for line in proc.stdout:
        seen += line
        if line.startswith("processors "):
            break
    directory, postgres = work_dir(seen), postgres_dir(seen)
    try:
        assert len(processes_using(directory)) >= 8, processes_using(directory)  # servers, brokers, sink, workers
        assert processes_using(postgres)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while (processes_using(directory) or processes_using(postgres)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_using(directory) == [] and processes_using(postgres) == []
    finally:
        subprocess.run(["rm", "-rf", str(directory), str(postgres)])


# (suite time: the stop while the pieces start runs with -m slow, the stop while events stream by default; that
# one on one broker, the default demo's cluster stops in the --keep test above by SIGTERM, the same cleanup)
@pytest.mark.parametrize("when, brokers", [
    pytest.param(r"^broker( \d)? +127\.0\.0\.1:", (), marks=pytest.mark.slow, id="starting"),
    pytest.param(r"streaming: changes", ("--single-broker",), id="streaming")])
def test_ctrl_c_stops_every_process_and_removes_the_files(when, brokers):
    """SIGINT while the pieces start (MariaDB and the broker are up) and while events stream."""
    proc = subprocess.Popen([*DEMO, *brokers], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=ENV, preexec_fn=as_from_a_terminal)
    seen = ""
    for line in proc.stdout:
        seen += line
        if re.search(when, line):
            break
    assert re.search(when, seen, re.M), seen            # (else the demo ended first: its output says why)
    directory, postgres = work_dir(seen), postgres_dir(seen)
    assert processes_using(directory)                   # MariaDB at least is running now
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1, seen + rest
    assert "interrupted" in rest
    assert not directory.exists() and not postgres.exists()
    assert processes_using(directory) == [] and processes_using(postgres) == []
