"""docker-compose.yml and the Dockerfile, checked without a Docker engine (this machine has none).

What can be checked here is checked for real: every binlake container's command line is parsed by
the `binlake` command itself, the connector configs it names exist, ship in the image and validate
with the container's environment, ports line up with what the commands listen on, and the MariaDB
settings are the ones the sandbox (and so the test suite) uses. Whether the images build and the
containers talk to each other is untested.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml

from binlake.cli import main
from binlake.sandbox import BINLOG_OPTIONS, CDC_GRANTS
from brokerproc import ROOT
from connect import config as connect_config

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PLACEHOLDERS = {"zookeeper", "processor", "spark-sink"}


def binlake_services() -> dict[str, dict]:
    return {name: s for name, s in SERVICES.items() if s.get("image") == "binlake:dev" and name not in PLACEHOLDERS}


def parse_binlake(args: list[str]) -> click.Context:
    """Parse a command line the way `binlake` does, down to the leaf command, without running it
    (click checks every option, type and required argument)."""
    command, name, rest, ctx = main, "binlake", list(args), None
    while isinstance(command, click.Group):      # our groups take no options of their own here
        ctx = click.Context(command, info_name=name, parent=ctx)
        name, rest = rest[0], rest[1:]
        command = command.get_command(ctx, name)
        assert command is not None, f"no binlake subcommand {name!r} in {args}"
    return command.make_context(name, rest, parent=ctx)


def test_the_pipeline_services_exist_and_placeholders_stay_off_by_default():
    assert {"mariadb", "mariadb-setup", "broker", "connect"} | PLACEHOLDERS <= set(SERVICES)
    for name in PLACEHOLDERS:
        assert SERVICES[name]["profiles"] == ["placeholder"], name
    for name, service in SERVICES.items():
        depends = service.get("depends_on", {})
        for needed in depends:
            assert needed in SERVICES, f"{name} depends on unknown service {needed}"
            assert needed not in PLACEHOLDERS, f"{name} depends on placeholder {needed}"


@pytest.mark.parametrize("name", sorted(binlake_services()))
def test_binlake_commands_are_real_command_lines(name):
    ctx = parse_binlake(SERVICES[name]["command"])
    assert ctx.command.name in {"broker", "run"}
    assert SERVICES[name]["build"] == "."


def test_broker_listens_where_it_advertises_and_the_connector_points_at_it():
    broker = parse_binlake(SERVICES["broker"]["command"]).params
    assert broker["listen"] == "0.0.0.0:9092"
    assert "advertised.listeners=PLAINTEXT://broker:9092" in broker["override"]
    assert SERVICES["connect"]["environment"]["BOOTSTRAP_SERVERS"] == "broker:9092"


def test_connector_configs_exist_ship_in_the_image_and_validate_with_the_container_environment():
    service = SERVICES["connect"]
    params = parse_binlake(service["command"]).params
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for path in params["configs"]:
        assert (ROOT / path).is_file(), path
        assert Path(path).parts[0] not in ignored, f"{path} is left out of the image by .dockerignore"
        spec = connect_config.load(ROOT / path, service["environment"])
        assert spec.runtime.bootstrap_servers in ("broker:9092", ["broker:9092"])
        assert spec.config.database.host == "mariadb"
        assert spec.config.database.password.get_secret_value() == "cdc-secret"


def test_published_ports_match_what_the_commands_listen_on():
    rest = parse_binlake(SERVICES["connect"]["command"]).params["rest"]
    assert SERVICES["connect"]["ports"] == [f"8083:{rest.rsplit(':', 1)[1]}"]
    assert SERVICES["mariadb"]["ports"] == ["3307:3306"]


def test_mariadb_runs_with_the_sandbox_binlog_settings_and_grants():
    flags = set(SERVICES["mariadb"]["command"])
    for key, value in BINLOG_OPTIONS.items():
        if key != "log-bin":
            assert f"--{key}={value}" in flags, key
    assert any(flag.startswith("--log-bin") for flag in flags)
    setup = " ".join(SERVICES["mariadb-setup"]["command"])
    assert f"GRANT {CDC_GRANTS} ON *.* TO 'cdc'@'%'" in setup
    assert "IDENTIFIED BY 'cdc-secret'" in setup
    assert SERVICES["connect"]["environment"]["MYSQL_PASSWORD"] == "cdc-secret"


def test_dockerfile_installs_binlake_on_python_slim():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert re.search(r"pip install \.", text)
    assert 'ENTRYPOINT ["binlake"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
