"""`docker-compose up` for real (pytest-docker): the compose pipeline from nothing, a row written to
the source database seen in PostgreSQL and in the Delta table, a broker container killed, another row
seen again, then everything torn down with its volumes; once from MariaDB (docker-compose.yml) and
once from Oracle MySQL (with docker-compose.mysql.yml). Marked `docker`: it needs a Docker engine and
the images (`make compose-image MYSQL=1` builds them all), and takes minutes, so the default suite
leaves it out; `make test-all` or `pytest -m docker` runs it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docker"))
import check  # noqa: E402  (docker/check.py: the end-to-end check `make compose-demo` runs)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

FILES = {"MariaDB": ["docker-compose.yml"], "MySQL": ["docker-compose.yml", "docker-compose.mysql.yml"]}
MYSQL_ROOT_IMAGE = "binlake-mysql-root:dev"   # docker/mysql.Dockerfile's base: `make compose-mysql-root`


@pytest.fixture(scope="session", params=sorted(FILES))
def server(request) -> str:
    """The source database's server, MariaDB or MySQL."""
    if request.param == "MySQL" and subprocess.run(["docker", "image", "inspect", MYSQL_ROOT_IMAGE],
                                                   capture_output=True).returncode != 0:
        pytest.fail(f"no image {MYSQL_ROOT_IMAGE} to build MySQL's from: run `make compose-image MYSQL=1`")
    return request.param


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return "docker-compose"  # (Compose 1.29, Debian's; the file works with Compose v2 as well)


@pytest.fixture(scope="session")
def docker_compose_file(server) -> list[str]:
    return [str(ROOT / file) for file in FILES[server]]


@pytest.fixture(scope="session")
def docker_compose_project_name(server) -> str:
    return f"binlake-test-{server.lower()}-{int(time.time())}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return ["up --build -d"]  # (pytest-docker's default adds --wait, which Compose 1.29 does not know)


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v"]  # (the volumes too: a test leaves nothing behind)


def test_compose_up_lands_a_row_through_a_broker_death(server, docker_services, docker_compose_project_name, spark,
                                                       monkeypatch):
    """docker_services has run `docker-compose up --build -d`; the services wait on each other's
    health checks, so the first row's wait covers the pipeline's start (Spark's the longest)."""
    monkeypatch.setattr(check, "COMPOSE", check.compose_command(FILES[server], docker_compose_project_name))
    check.insert_customer(900001, "Before")
    assert check.server_name() == server
    seen = check.wait_landed(spark, 900001, "Before", timeout=900)
    assert set(seen) == {"PostgreSQL", "Delta"}

    check.compose("kill", "broker-1")
    check.insert_customer(900002, "After")
    seen = check.wait_landed(spark, 900002, "After", timeout=600)
    assert set(seen) == {"PostgreSQL", "Delta"}
    assert "Exit" in subprocess.run([*check.COMPOSE, "ps", "broker-1"], capture_output=True, text=True).stdout

