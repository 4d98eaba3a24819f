"""docker-compose.yml, its MySQL override and the Dockerfiles, checked in seconds without a Docker engine
(the compose pipeline itself runs in tests/test_compose_up.py, marked `docker`): every binlake
container's command line is parsed by the `binlake` command itself, the configs it names exist, ship in
the image and validate with the container's environment, services wait only on health checks that
exist, and MariaDB and MySQL get the binlog settings and grants the test suite's servers get."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml

from binlake.cli import main
from sandbox.sql import BINLOG_OPTIONS, CDC_GRANTS, MYSQL_OPTIONS
from brokerproc import ROOT
from connect import config as connect_config
from spark_sink.config import load as load_sink_config

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
MYSQL_OVERRIDE = yaml.safe_load((ROOT / "docker-compose.mysql.yml").read_text())
IN_IMAGE = Path("/opt/binlake")  # where the Dockerfile puts examples/ and docker/


def binlake_services() -> dict[str, list[str]]:
    """Service → its `binlake ...` arguments (a shell command's binlake part for the processor)."""
    found = {}
    for name, service in SERVICES.items():
        command = service.get("command", [])
        if command[:1] == ["binlake"]:
            found[name] = command[1:]
        elif command[:2] == ["sh", "-c"] and "exec binlake " in command[2]:
            found[name] = command[2].split("exec binlake ", 1)[1].split()
    return found


def parse_binlake(args: list[str]) -> click.Context:
    """Parse a command line the way `binlake` does, down to the leaf command, without running it."""
    command, name, rest, ctx = main, "binlake", list(args), None
    while isinstance(command, click.Group):
        ctx = click.Context(command, info_name=name, parent=ctx)
        name, rest = rest[0], rest[1:]
        command = command.get_command(ctx, name)
        assert command is not None, f"no binlake subcommand {name!r} in {args}"
    return command.make_context(name, rest, parent=ctx)


def in_project(path: str) -> Path:
    """The project file an in-image path comes from."""
    return ROOT / Path(path).relative_to(IN_IMAGE)


def test_every_piece_of_the_pipeline_is_a_service_and_waits_on_real_health_checks():
    assert {"database", "workload", "zookeeper", "broker-0", "broker-1", "broker-2", "connect", "processor", "postgres",
            "sink", "console"} <= set(SERVICES)
    for name, service in SERVICES.items():
        for needed, how in service.get("depends_on", {}).items():
            assert needed in SERVICES, f"{name} depends on unknown service {needed}"
            if how["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[needed], f"{name} waits on {needed}, which has no health check"
    assert set(COMPOSE["volumes"]) >= {"broker-0-data", "warehouse", "postgres-data", "mariadb-data"}
    for name in ("workload", "connect"):     # (the connector and the workload reach the source by its service name)
        assert SERVICES[name]["environment"]["MYSQL_HOST"] == "database"


@pytest.mark.parametrize("name", sorted(binlake_services()))
def test_binlake_commands_are_real_command_lines(name):
    ctx = parse_binlake(binlake_services()[name])
    assert ctx.command.name in {"broker", "run", "worker", "console"}


def test_each_broker_advertises_its_own_service_name():
    for n in range(3):
        params = parse_binlake(binlake_services()[f"broker-{n}"]).params
        assert params["broker_id"] == n and params["listen"] == "0.0.0.0:9092"
        assert f"advertised.listeners=PLAINTEXT://broker-{n}:9092" in params["override"]


def test_configs_exist_ship_in_the_image_and_validate_with_the_container_environment():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    service = SERVICES["connect"]
    for path in parse_binlake(binlake_services()["connect"]).params["configs"]:
        spec = connect_config.load(in_project(path), service["environment"])
        assert in_project(path).relative_to(ROOT).parts[0] not in ignored
        assert spec.runtime.bootstrap_servers in ("broker-0:9092,broker-1:9092,broker-2:9092",
                                                  ["broker-0:9092", "broker-1:9092", "broker-2:9092"])
        assert spec.config.database.host == "database"
    for path in parse_binlake(binlake_services()["sink"]).params["config_paths"]:
        config = load_sink_config(in_project(str(path)))
        assert config.checkpoint.startswith("/var/lib/binlake/warehouse/")  # (on the named volume)


@pytest.mark.parametrize("kind, options", [("mariadb", BINLOG_OPTIONS), ("mysql", MYSQL_OPTIONS)])
def test_the_database_runs_with_the_sandbox_binlog_settings_and_grants(kind, options):
    """docker/<kind>.sh starts the server with sandbox.sql's options (MySQL: its defaults plus
    GTIDs, so no binlog_row_metadata), and docker/<kind>-init.sql makes the cdc user with its grants."""
    script = (ROOT / "docker" / f"{kind}.sh").read_text()
    for key, value in options.items():
        assert f"--{key}={value}" in script if value else f"--{key}" in script, key
    if kind == "mysql":
        assert "row-metadata" not in script and "authentication" not in script  # (MySQL's defaults)
    init = (ROOT / "docker" / f"{kind}-init.sql").read_text()
    assert f"GRANT {CDC_GRANTS[kind]} ON *.* TO 'cdc'@'%'" in init
    assert SERVICES["connect"]["environment"]["MYSQL_PASSWORD"] == "cdc-secret" and "'cdc-secret'" in init
    password = SERVICES["workload"]["environment"]["MYSQL_ROOT_PASSWORD"]
    assert f"'root'@'%' IDENTIFIED {'WITH caching_sha2_password ' if kind == 'mysql' else ''}BY '{password}'" in init


def test_the_mysql_override_swaps_only_the_database_for_the_sandbox_root_image():
    """docker-compose.mysql.yml replaces the database service's image, command, data volume and health
    check; its image builds on the MySQL root `make compose-mysql-root` imports, with the files it
    copies in docker/ (its build context) and the command they provide."""
    assert set(MYSQL_OVERRIDE["services"]) == {"database"}
    database = MYSQL_OVERRIDE["services"]["database"]
    assert database["image"] != SERVICES["database"]["image"]
    base_volume = SERVICES["database"]["volumes"][0].split(":")
    volume = database["volumes"][0].split(":")
    assert volume[1] == base_volume[1] and volume[0] != base_volume[0] and volume[0] in MYSQL_OVERRIDE["volumes"]
    assert database["healthcheck"]["test"][1] == "mysqladmin"
    context = ROOT / database["build"]["context"]
    dockerfile = (context / database["build"]["dockerfile"]).read_text()
    base = re.search(r"^FROM (\S+)$", dockerfile, re.M).group(1)
    assert f"docker import - {base}" in (ROOT / "Makefile").read_text()
    copied = re.search(r"^COPY (.+) (\S+)$", dockerfile, re.M)
    assert all((context / name).is_file() for name in copied.group(1).split())
    assert database["command"][0] == str(Path(copied.group(2)) / "mysql.sh")


def test_the_image_builds_from_debian_with_packages_from_the_host_only():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM debian:bookworm$", text, re.M)
    assert "pip install -q --no-index --find-links /tmp/wheelhouse" in text  # (no index inside the build)
    assert "COPY .cache/spark-jars" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored and ".cache/wheelhouse" not in ignored
