"""`binlake console` in a real browser (Debian's chromium, headless, driven by Selenium through
Debian's chromedriver) against a running pipeline: MariaDB, the mysql connector with its REST API,
a broker, a consumer group, and the Spark sink's metrics. Each page is loaded and what it shows is
checked. BINLAKE_CONSOLE_SCREENSHOTS=DIR saves a screenshot of each page there (docs/console.md's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sql_fixtures import by_default_on
from e2e_harness import mysql_config, write_config
from sandbox.process import free_port
from sink_harness import run_sink
from testkit.brokerproc import ROOT
from waiting import wait_for

SCREENSHOTS = os.environ.get("BINLAKE_CONSOLE_SCREENSHOTS")


class Console:
    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / f"console-{free_port()}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "console", "--listen", "127.0.0.1:0",
                                          *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        found = wait_for(lambda: re.search(r"binlake console on (http://\S+/)", self.log.read_text()),
                         "the console to serve")
        self.url = found.group(1)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


def open_view(browser, url: str, hash_: str, expect: str, timeout: float = 60) -> str:
    """Load a view and wait until its text holds `expect` (the page refreshes itself every 5 s)."""
    browser.get(f"{url}#{hash_}")
    WebDriverWait(browser, timeout, poll_frequency=0.5).until(
        lambda d: expect in d.find_element(By.ID, "view").text)
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SCREENSHOTS) / f"{hash_.split('?')[0]}.png"))
    return browser.find_element(By.ID, "view").text


def chart_points(browser, db: str, quantile: str) -> list[str]:
    """The points of one line of the table's freshness chart (none while the page redraws)."""
    lines = browser.find_elements(By.CSS_SELECTOR, f"[data-table='binlake-sink {db}.items'] polyline.{quantile}")
    try:
        return lines[0].get_attribute("points").split() if lines else []
    except StaleElementReferenceException:
        return []


@by_default_on("mysql")
def test_each_page_shows_the_running_pipeline(browser, server, broker, connector, spark, tmp_path, monkeypatch):
    from common.prometheus import serve_in_thread
    from prometheus_scrape import sample, scrape
    from spark_sink import metrics

    monkeypatch.setattr(metrics.FRESHNESS, "window_s", 600)  # (the sink's batches stay in it while the pages load)

    db = server.new_database()
    server.sql(f"CREATE TABLE {db}.items (id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(8,2))",
                f"INSERT INTO {db}.items VALUES (1, 'mug', 12.50), (2, 'tee', 19.90)")
    rest = f"127.0.0.1:{free_port()}"
    connector(write_config(tmp_path / "console.yaml", **mysql_config("web", broker, server, [rf"{db}\..*"])),
              args=("--rest", rest))
    topic = f"web.{db}.items"
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "billing", "enable.auto.commit": False})

    def end_offset() -> int:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), 5)[1] \
            if topic in consumer.list_topics(timeout=5).topics else 0
    wait_for(lambda: end_offset() >= 2, "the snapshot's two reads")
    written = time.time()
    server.sql(f"UPDATE {db}.items SET price = 14.00 WHERE id = 1", f"DELETE FROM {db}.items WHERE id = 2")
    committed = time.time()
    wait_for(lambda: end_offset() >= 7, "the update and the delete")  # (and each transaction's marker)
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # a group with lag: 1 of 4+
    consumer.close()
    started = time.time()
    run_sink(spark, {"bootstrap_servers": broker.address, "topics": [topic], "format": "debezium",
                     "schema_topic": "web", "checkpoint": str(tmp_path / "checkpoint"), "trigger": "available_now",
                     "target": {"delta": {"path": str(tmp_path / "delta")}}})
    visible = time.time()
    sink_metrics = serve_in_thread(metrics.REGISTRY, "127.0.0.1:0")
    # Freshness, MySQL's clock against this one (the same host): the update and the delete were
    # committed between `written` and `committed` (binlog times are whole seconds, so up to 1 s
    # earlier), and became visible between the sink's start and its end; the snapshot's reads do not count.
    freshness = [sample(scrape(sink_metrics), "binlake_sink_freshness_seconds", query="binlake-sink",
                        table=f"{db}.items", quantile=q) for q in ("0.5", "0.99")]
    assert started - committed <= freshness[0] <= freshness[1] <= visible - written + 1, (freshness, visible - written)

    console = Console(tmp_path, "--bootstrap-server", broker.address, "--connect", f"http://{rest}",
                      "--sink", sink_metrics)
    try:
        text = open_view(browser, console.url, "cluster", "controller")
        assert re.search(rf"\b0\s+127\.0\.0\.1\s+{broker.address.split(':')[1]}\s+controller", text), text
        text = open_view(browser, console.url, "topics", topic)
        assert "in sync" in text
        text = open_view(browser, console.url, f"topics?topic={topic}", "browse its messages")
        assert re.search(r"^0 0 0 0 \d", text, re.M), text  # partition 0: leader 0, replicas 0, ISR 0, from 0
        text = open_view(browser, console.url, f"messages?topic={topic}&partition=0", "record(s) of")
        assert f"{db}.items c" in text or f"{db}.items r" in text, text
        assert 'price: "12.50" → "14.00"' in text, text   # the update, decoded
        assert f"{db}.items d" in text, text
        text = open_view(browser, console.url, "groups", "billing")
        assert re.search(r"billing\s+EMPTY\s+0\s+\d", text), text
        text = open_view(browser, console.url, "transactions", "binlake-connect-web-0")
        text = open_view(browser, console.url, "connectors", "RUNNING")
        assert "web mysql RUNNING" in text and "1/1 tables, 2 rows" in text, text
        assert not browser.find_elements(By.CSS_SELECTOR, "button[data-restart]")  # read-only
        text = open_view(browser, console.url, "sink", "binlake-sink")
        assert f"{db}.items: 4" in text, text  # row changes merged: 2 snapshot reads, the update, the delete
        shown = re.search(rf"{db}\.items: p50 ([\d.]+) s, p99 ([\d.]+) s", text)
        assert shown and all(abs(float(v) - f) <= 0.05 for v, f in zip(shown.groups(), freshness)), text
        WebDriverWait(browser, 60, poll_frequency=0.5).until(  # a point more at each refresh
            lambda d: len(chart_points(d, db, "p99")) >= 2 and len(chart_points(d, db, "p50")) >= 2)
        chart = browser.find_element(By.CSS_SELECTOR, f"[data-testid=freshness-chart][data-table='binlake-sink {db}.items']")
        assert chart.is_displayed() and chart.size["height"] > 100, chart.size

        # The pipeline, stage by stage, and live: new rows in MySQL show up as the connector's records and rate.
        open_view(browser, console.url, "pipeline", "Processors")
        stages = {s: browser.find_element(By.CSS_SELECTOR, f"[data-testid=stage-{s}]").text
                  for s in ("mysql", "connector", "log", "processors", "sink")}
        assert f"127.0.0.1:{server.port}" in stages["mysql"] and "read by web" in stages["mysql"], stages
        assert "web\nRUNNING" in stages["connector"], stages
        assert re.search(r"billing\nEMPTY, 0 member\(s\)\n[1-9]\d* records behind", stages["processors"]), stages
        # (the query's rows merged, over every run of this process: the sink's metrics are per process)
        merged = sum(v for (name, labels), v in scrape(sink_metrics).items()
                     if name == "binlake_sink_rows_total" and ("query", "binlake-sink") in labels)
        assert f"binlake-sink\n{merged:,.0f} rows merged" in stages["sink"] and merged >= 4, (merged, stages)
        assert topic in browser.find_element(By.CSS_SELECTOR, ".topics").text
        written = int(re.search(r"([\d,]+) records written", stages["connector"]).group(1).replace(",", ""))
        server.sql(f"INSERT INTO {db}.items VALUES (3, 'cap', 9.00), (4, 'pin', 2.50)")

        def connector_stage():
            try:
                return browser.find_element(By.CSS_SELECTOR, "[data-testid=stage-connector]").text
            except StaleElementReferenceException:
                return ""
        shown = WebDriverWait(browser, 60, poll_frequency=0.5).until(
            lambda d: (m := re.search(r"([\d,]+) records written\n([\d.,]+) records/s", connector_stage()))
            and int(m.group(1).replace(",", "")) >= written + 2 and m)
        assert float(shown.group(2).replace(",", "")) > 0, connector_stage()
    finally:
        console.stop()

    writer = Console(tmp_path, "--bootstrap-server", broker.address, "--connect", f"http://{rest}", "--allow-writes")
    try:
        open_view(browser, writer.url, "connectors", "RUNNING")
        browser.find_element(By.CSS_SELECTOR, "button[data-restart='web']").click()
        WebDriverWait(browser, 60).until(lambda d: "done: restart" in d.find_element(By.ID, "action").text)
        open_view(browser, writer.url, "groups", "billing")
        browser.find_element(By.CSS_SELECTOR, "button[data-reset='billing'][data-to='latest']").click()
        WebDriverWait(browser, 60).until(lambda d: "done: reset to latest" in d.find_element(By.ID, "action").text)
        text = open_view(browser, writer.url, "groups", "billing")
        assert re.search(r"billing\s+EMPTY\s+0\s+0\b", text), text
    finally:
        writer.stop()
