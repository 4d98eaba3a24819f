"""Connector config files: YAML, ${VAR} interpolation, and validation that reports every problem with its path."""

import subprocess

import pytest
from connect_testlib import CONNECT, ROOT

from connect import config, worker_config
from connect.config import ConfigError

pytest_plugins = ["connect_fixtures"]  # its fixtures: connect_run, write_config

FLAKY = "flaky_plugin:FlakyConnector"  # tests/connect is on sys.path here and in ConnectProcess
BASE = {"name": "shop", "connector": "datagen", "bootstrap_servers": "127.0.0.1:9092"}


def problems(raw: dict, environ: dict | None = None) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        config.validate(raw, "shop.yaml", environ or {})
    return dict(caught.value.problems)


def test_minimal_config_gets_defaults():
    spec = config.validate(dict(BASE), "shop.yaml", {})
    assert spec.runtime.delivery == "exactly_once"
    assert spec.runtime.offsets.topic == "binlake-offsets"
    assert spec.plugin.__name__ == "DatagenConnector"
    assert spec.config.batch_size == 10


def test_unknown_keys_are_named_with_their_path_and_a_suggestion():
    found = problems({**BASE, "restart": {"initial_backof_ms": 5}, "offsets": {"topik": "x"}, "cont": 5})
    assert found == {
        "restart.initial_backof_ms": "unknown key; did you mean 'initial_backoff_ms'?",
        "offsets.topik": "unknown key; did you mean 'topic'?",
        "cont": "unknown key; did you mean 'count'?",  # a plugin key, suggested from the plugin's model
    }


def test_unknown_top_level_key_suggests_runtime_keys_too():
    assert problems({**BASE, "bootstrap_server": "x"}) == {
        "bootstrap_server": "unknown key; did you mean 'bootstrap_servers'?"}


def test_every_problem_is_reported_at_once():
    found = problems({"name": "bad name!", "connector": "datagen", "delivery": "twice", "batch_size": 0})
    assert set(found) == {"name", "bootstrap_servers", "delivery", "batch_size"}
    assert found["bootstrap_servers"] == "required key is missing"
    assert "'exactly_once' or 'at_least_once'" in found["delivery"] and "(got 'twice')" in found["delivery"]
    assert "greater than or equal to 1" in found["batch_size"]


def test_unknown_connector_suggests_an_installed_one():
    found = problems({**BASE, "connector": "datagn"})
    assert "no connector plugin named 'datagn'; did you mean 'datagen'?" in found["connector"]


def test_module_class_reference_loads_a_plugin_and_its_model():
    spec = config.validate({**BASE, "connector": FLAKY, "fail_at": 3, "token": "s3cret"}, "f.yaml", {})
    assert spec.config.fail_at == 3
    assert spec.public()["token"] == "**********"  # secrets never leave through the REST API
    assert "fail_at" in problems({**BASE, "connector": FLAKY})


def test_transform_errors_point_into_the_list():
    found = problems({**BASE, "transforms": [
        {"type": "filter", "feild": "value.id", "op": "eq", "value": 1},
        {"type": "rename", "regex": "a"},
        {"type": "rename_topic", "regex": "(a)", "replacement": r"\2"},
        {"type": "drop_fields", "fields": ["password"]},
        {"regex": "x"},
    ]})
    assert found["transforms[0].feild"] == "unknown key; did you mean 'field'?"
    assert found["transforms[0].field"] == "required key is missing"
    assert found["transforms[1].type"] == ("unknown type 'rename'; did you mean 'rename_topic'? "
                                           "allowed: filter, rename_topic, drop_fields")
    assert "replacement does not fit the regex" in found["transforms[2]"]
    assert "must start with one of key, value" in found["transforms[3].fields"]
    assert found["transforms[4].type"] == "required key is missing"


def test_env_interpolation_with_defaults_and_escapes():
    raw = {**BASE, "bootstrap_servers": "${HOST}:${PORT:-9092}", "topic": "$${literal}-${SUFFIX:-}",
           "batch_size": "${BATCH}"}
    spec = config.validate(raw, "shop.yaml", {"HOST": "10.0.0.1", "BATCH": "25"})
    assert spec.runtime.bootstrap_servers == "10.0.0.1:9092"
    assert spec.config.topic == "${literal}-"
    assert spec.config.batch_size == 25  # interpolated strings are then validated as the key's type


def test_missing_environment_variable_is_named_with_where_it_is_used():
    found = problems({**BASE, "offsets": {"topic": "${OFFSETS_TOPIC}"}, "topic": "${1BAD}"})
    assert found["offsets.topic"] == ("environment variable OFFSETS_TOPIC is not set "
                                      "(export it, or give a default: ${OFFSETS_TOPIC:-value})")
    assert "bad reference ${1BAD}" in found["topic"]


def test_restart_backoff_bounds_are_checked():
    found = problems({**BASE, "restart": {"initial_backoff_ms": 500, "max_backoff_ms": 100}})
    assert "max_backoff_ms (100) is below initial_backoff_ms (500)" in found["restart"]
    restart = config.RestartConfig(initial_backoff_ms=100, max_backoff_ms=500, multiplier=2)
    assert [restart.backoff_ms(n) for n in range(1, 6)] == [100, 200, 400, 500, 500]


def test_yaml_problems(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: a\nconnector: datagen\nname: b\n")
    with pytest.raises(ConfigError, match=r"key 'name' appears twice \(first at line 1\)"):
        config.load(path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        config.load(path)
    with pytest.raises(ConfigError, match="cannot read the file"):
        config.load(tmp_path / "missing.yaml")


def test_hostile_yaml_is_refused_quickly_with_a_reason(tmp_path):
    """An alias bomb (9 levels of 9 aliases: half a billion values once expanded), nesting deeper
    than any config, a file of 50 MB and bytes that are not text: each is a ConfigError naming why."""
    path = tmp_path / "hostile.yaml"
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]" for p, c in zip("abcdefgh", "bcdefghi")]
    cases = {
        "\n".join(["name: x", "connector: datagen", *bomb]): r"expands to 490,329,068 values through its aliases",
        "name: " + "[" * 100_000 + "]" * 100_000: "nests too deeply",
        "name: x\n" + "#" * (50 * 2**20): "larger than 1,048,576 bytes",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            config.load(path)
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        config.load(path)


def test_aliases_of_a_normal_size_still_work(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("name: shop\nconnector: datagen\nbootstrap_servers: &servers 127.0.0.1:9092\n"
                    "restart: &backoff {initial_backoff_ms: 100, max_backoff_ms: 1000, multiplier: 2}\n")
    assert config.load(path, environ={}).runtime.bootstrap_servers == "127.0.0.1:9092"


def test_cli_validate_reports_all_files_and_exits_2(write_config):
    good = write_config("good.yaml", **BASE)
    bad = write_config("bad.yaml", **{**BASE, "database": {"port": 1}, "delivery": "maybe"})
    out = subprocess.run([*CONNECT, "validate", str(good)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and "good.yaml: ok (shop: datagen, exactly_once)" in out.stdout
    out = subprocess.run([*CONNECT, "run", str(good), str(bad)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert "bad.yaml: 2 problems" in out.stderr
    assert "  database: unknown key; allowed:" in out.stderr
    assert "  delivery: Input should be 'exactly_once' or 'at_least_once' (got 'maybe')" in out.stderr


def test_the_datagen_example_is_valid():
    spec = config.load(ROOT / "examples" / "datagen.yaml", environ={})
    assert (spec.name, spec.runtime.bootstrap_servers, len(spec.runtime.transforms)) == ("demo", "127.0.0.1:9092", 3)


def test_the_worker_example_is_valid_and_worker_files_report_every_problem(tmp_path, monkeypatch):
    monkeypatch.delenv("BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("CONNECT_REST", raising=False)
    worker = worker_config.load(ROOT / "examples" / "connect-worker.yaml")
    assert (worker.group_id, worker.rest_address, worker.config_topic) == (
        "binlake-connect", ("127.0.0.1", 8083), "binlake-connect-configs")
    bad = tmp_path / "worker.yaml"
    for text, problem in [("rest: nowhere\nconfig.storage.topik: c\n", "rest: 'nowhere' is not HOST:PORT"),
                          ("rest: nowhere\nconfig.storage.topik: c\n",
                           "config.storage.topik: unknown key; did you mean 'config.storage.topic'?"),
                          ("heartbeat.interval.ms: 20000\n",
                           "heartbeat.interval.ms (20000) must be below session.timeout.ms (10000)")]:
        bad.write_text("bootstrap_servers: b:9092\n" + text)
        with pytest.raises(ConfigError) as raised:
            worker_config.load(bad)
        assert problem in str(raised.value)
