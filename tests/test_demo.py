"""`binlake demo` end to end: a throwaway MariaDB, ZooKeeper and three brokers (or one broker alone) and the
mysql connector, run by the real command in a subprocess; its output must show events of every table and a
summary where the change log matches MySQL, with the counts the workload implies. Nothing may be left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerproc import ROOT

# table -> (rows in MySQL, events r/c/u/d, ddl) after the demo's snapshot and workload (binlake/demo/shop.py)
EXPECTED = {
    "debezium": {"shop.customers": ("4", "3/1/1/0", "1"), "shop.orders": ("5", "3/3/4/1", "2"),
                 "shop.products": ("3", "3/1/1/1", "1")},
    # Canal has no snapshot op: snapshot rows are INSERTs
    "canal": {"shop.customers": ("4", "0/4/1/0", "1"), "shop.orders": ("5", "0/6/4/1", "2"),
              "shop.products": ("3", "0/4/1/1", "1")},
}


DEMO = [sys.executable, "-m", "binlake.cli", "demo"]
ENV = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}      # rows unclipped, lines as they come


def run_demo(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([*DEMO, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, env=ENV)
    return result, time.monotonic() - started


def work_dir(output: str) -> Path:
    return Path(re.search(r"files in (/\S+)", output).group(1))


def processes_using(directory: Path) -> list[str]:
    """Command lines that mention `directory` (mariadbd's datadir, the broker's, the connector's config)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in args:
            found.append(args)
    return found


@pytest.mark.parametrize("fmt, brokers", [("debezium", "cluster"), ("canal", "single")])
def test_demo_shows_every_table_and_the_log_matches_mysql(fmt, brokers):
    """By default on ZooKeeper and three brokers, one of them SIGKILLed halfway; or one broker alone."""
    result, elapsed = run_demo("--format", fmt, *(["--single-broker"] if brokers == "single" else []))
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert elapsed < 60
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
    assert re.search(r"ddl +ALTER TABLE orders ADD COLUMN gift_note", out)
    assert "gift_note='happy birthday'" in out                             # the row after the ALTER
    for table, (rows, ops, ddl) in EXPECTED[fmt].items():
        assert re.search(rf"^ +{re.escape(table)} +{rows} +{ops} +{ddl} +{rows} +yes", out, re.M), table
    assert "the log matches MySQL" in out
    assert not work_dir(out).exists()


def test_demo_keep_leaves_the_pipeline_running_and_says_how_to_stop_it():
    result, _ = run_demo("--keep")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    directory = work_dir(out)
    stop = re.search(r"stop +kill ([\d ]+);", out)
    pids = [int(p) for p in stop.group(1).split()]
    try:
        assert directory.exists()
        broker = re.search(r"binlake consume --bootstrap-server (\S+) --topic (\S+)", out)
        consumed = subprocess.run([sys.executable, "-m", "binlake.cli", "consume", "--bootstrap-server",
                                   broker.group(1), "--topic", broker.group(2), "--from-beginning",
                                   "--timeout-ms", "3000"], capture_output=True, text=True, timeout=60)
        assert consumed.stdout.count('"op":"c"') == 3      # orders 4, 5, 6, read back from the kept broker
    finally:
        for pid in pids:
            subprocess.run(["kill", str(pid)])
        for pid in pids:
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        for pid in left:
            subprocess.run(["kill", "-9", str(pid)])
        subprocess.run(["rm", "-rf", str(directory)])
    assert left == [], "the stop line left processes running (ZooKeeper stops first: brokers must still exit)"


@pytest.mark.parametrize("when", [r"^broker( \d)? +127\.0\.0\.1:", r"streaming: changes"])
def test_ctrl_c_stops_every_process_and_removes_the_files(when):
    """SIGINT while the pieces start (MariaDB and the broker are up) and while events stream."""
    proc = subprocess.Popen(DEMO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV)
    seen = ""
    for line in proc.stdout:
        seen += line
        if re.search(when, line):
            break
    directory = work_dir(seen)
    assert processes_using(directory)                   # MariaDB at least is running now
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1, seen + rest
    assert "interrupted" in rest
    assert not directory.exists()
    assert processes_using(directory) == []
