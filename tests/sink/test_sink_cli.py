"""`binlake sink run`: a wrong config or missing jars stop it before Spark starts, saying what to do."""

import json
import os
import subprocess
import sys

from binlake.brokerproc import ROOT


def sink_run(config_path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(config_path)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=120)


def test_every_problem_of_a_config_is_named(tmp_path):
    path = tmp_path / "sink.yaml"
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "topic_pattern": "x",
                                "checkpoint": "/tmp/x", "target": {"delta": {"path": "/w"}, "jdbc": {"url": "jdbc:mysql://h/d", "user": "u"}},
                                "mode": "scd3", "surprise": 1}))
    done = sink_run(path)
    assert done.returncode == 1
    for text in ("target.jdbc.url: only PostgreSQL is supported", "mode: Input should be",
                 "surprise: Extra inputs are not permitted"):
        assert text in done.stderr, done.stderr
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "topic_pattern": "x",
                                "checkpoint": "/tmp/x", "target": {"delta": {"path": "/w"}}}))
    done = sink_run(path)
    assert done.returncode == 1 and "give exactly one of topics" in done.stderr, done.stderr


def test_missing_jars_name_the_make_target(tmp_path):
    path = tmp_path / "sink.yaml"
    path.write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "checkpoint": str(tmp_path / "ck"),
                                "target": {"delta": {"path": str(tmp_path / "w")}}}))
    done = sink_run(path, env={"BINLAKE_SPARK_JARS": str(tmp_path / "no-jars")})
    assert done.returncode == 1 and "run `make spark-jars`" in done.stderr, done.stderr


def test_several_configs_need_distinct_names_and_checkpoints(tmp_path):
    """Each config is a streaming query of one Spark application: named after its file, with its own
    checkpoint (Spark keeps one query's offsets there)."""
    config = {"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"], "checkpoint": str(tmp_path / "ck"),
              "target": {"delta": {"path": str(tmp_path / "w")}}}
    for directory in ("one", "two"):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "sink.yaml").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "one" / "sink.yaml"),
                           str(tmp_path / "two" / "sink.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and "config files need distinct names" in done.stderr, done.stderr
    (tmp_path / "two" / "sink.yaml").rename(tmp_path / "two" / "lake.yaml")
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "one" / "sink.yaml"),
                           str(tmp_path / "two" / "lake.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and "each config needs its own checkpoint" in done.stderr, done.stderr


def test_every_files_problems_are_named_not_only_the_firsts(tmp_path):
    (tmp_path / "lake.yaml").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"],
                                                    "checkpoint": "/tmp/x", "target": {"delta": {}}}))
    (tmp_path / "pg.yaml").write_text(json.dumps({"bootstrap_servers": "127.0.0.1:1", "topics": ["a.b.c"],
                                                  "checkpoint": "/tmp/y", "mode": "scd3",
                                                  "target": {"delta": {"path": "/w"}}}))
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "sink", "run", str(tmp_path / "lake.yaml"),
                           str(tmp_path / "pg.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert f"{tmp_path / 'lake.yaml'}: 1 problem\n  target.delta.path: Field required" in done.stderr, done.stderr
    assert f"{tmp_path / 'pg.yaml'}: 1 problem\n  mode: Input should be" in done.stderr, done.stderr


def test_a_topic_pattern_names_the_schema_topic_as_topics_do(tmp_path):
    """docs/sink.md: schema_topic defaults to the connector's name, read from topic_pattern too."""
    path = tmp_path / "lake.yaml"
    config = {"bootstrap_servers": "127.0.0.1:1", "topic_pattern": r"shop\.shop\..*", "format": "debezium",
              "checkpoint": str(tmp_path / "ck"), "target": {"delta": {"path": str(tmp_path / "w")}}}
    path.write_text(json.dumps(config))
    done = sink_run(path, env={"BINLAKE_SPARK_JARS": str(tmp_path / "no-jars")})  # (past the config: the jars)
    assert done.returncode == 1 and "run `make spark-jars`" in done.stderr, done.stderr
    from spark_sink.config import validate
    assert validate(config).resolved_schema_topic == "shop"
    assert validate({**config, "topic_pattern": r"shop\.x?"}).resolved_schema_topic == "shop"
    path.write_text(json.dumps({**config, "topic_pattern": "shop.*"}))  # (no literal '<name>.' to read it from)
    done = sink_run(path)
    assert done.returncode == 1 and "schema_topic: name the connector's schema-change topic" in done.stderr, \
        done.stderr
