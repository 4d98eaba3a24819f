"""The compose demo's end-to-end check, from the host: a row written to the source database (MariaDB,
or MySQL with docker-compose.mysql.yml) in its container must reach PostgreSQL (read in its container)
and the Delta table (read from the warehouse volume with the host's Spark, the reader that knows
Delta), within a deadline. `make compose-demo` runs it; so does tests/test_compose_up.py, around a
broker container's death.

    .venv/bin/python docker/check.py [-f docker-compose.yml -f docker-compose.mysql.yml] [--timeout 600]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
WAREHOUSE = "/var/lib/binlake/warehouse"


def compose_command(files: list[str], project: str | None = None) -> list[str]:
    """docker-compose over `files` (relative to the project's root), in project `project` if given."""
    command = ["docker-compose", "--project-directory", str(ROOT)]
    for file in files:
        command += ["-f", str(ROOT / file)]
    return [*command, *(["-p", project] if project else [])]


COMPOSE = compose_command(["docker-compose.yml"])  # (main() sets the files it is given)


def compose(*args: str, timeout: float = 120) -> str:
    done = subprocess.run([*COMPOSE, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"docker-compose {' '.join(args)}: {(done.stderr + done.stdout).strip()[-2000:]}")
    return done.stdout


def mysql(sql: str) -> str:
    """`sql` in the shop database, by the `mysql` client in the database's container (MariaDB's client
    answers to that name too), as root@localhost through the socket."""
    return compose("exec", "-T", "database", "mysql", "-uroot", "shop", "-N", "-e", sql)


def server_name() -> str:
    return "MariaDB" if "MariaDB" in mysql("SELECT VERSION()") else "MySQL"


def postgres(sql: str) -> str:
    return compose("exec", "-T", "postgres", "psql", "-h", "127.0.0.1", "-U", "binlake", "warehouse", "-Atc", sql)


def warehouse_dir() -> Path:
    """Where the sink's named volume is on this host (root reads it)."""
    container = compose("ps", "-q", "sink").strip()
    found = subprocess.run(["docker", "inspect", "-f", "{{range .Mounts}}{{if eq .Destination \"%s\"}}{{.Source}}"
                            "{{end}}{{end}}" % WAREHOUSE, container], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip())


def insert_customer(customer_id: int, name: str, timeout: float = 300) -> None:
    """Once the workload has made the shop database (right after `up`, the server may still be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            mysql(f"INSERT INTO customers VALUES ({customer_id}, '{name}', '{name.lower()}@example.com', 'basic', "
                  f"NOW(3))")
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def in_postgres(customer_id: int) -> str | None:
    try:
        return postgres(f"SELECT name FROM shop.customers WHERE id = {customer_id}").strip() or None
    except RuntimeError:  # (the table is not there until the sink's first batch of it)
        return None


def in_delta(spark, path: Path, customer_id: int) -> str | None:
    try:
        rows = spark.read.format("delta").load(str(path / "shop" / "customers")) \
            .where(f"id = {customer_id} AND NOT __deleted").select("name").collect()
    except Exception:  # (not created yet)
        return None
    return rows[0]["name"] if rows else None


def wait_landed(spark, customer_id: int, name: str, timeout: float) -> dict[str, float]:
    """Seconds until the row was seen in each of PostgreSQL and Delta; RuntimeError after `timeout`."""
    started, seen = time.monotonic(), {}
    path = warehouse_dir()
    while len(seen) < 2:
        if "PostgreSQL" not in seen and in_postgres(customer_id) == name:
            seen["PostgreSQL"] = time.monotonic() - started
        if "Delta" not in seen and in_delta(spark, path, customer_id) == name:
            seen["Delta"] = time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"customer {customer_id} ({name}) reached only {sorted(seen) or 'nothing'} "
                               f"within {timeout:.0f} s; see `docker-compose logs connect sink`")
        time.sleep(2)
    return seen


def spark_session():
    from spark_sink.session import builder
    spark = builder("binlake-compose-check", master="local[1]").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", "--file", dest="files", action="append", metavar="FILE",
                        help="a compose file, as docker-compose takes them  [default: docker-compose.yml]")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the row to land (Spark starts first)")
    args = parser.parse_args()
    global COMPOSE
    COMPOSE = compose_command(args.files or ["docker-compose.yml"])
    console = Console()
    customer_id = int(time.time()) % 1_000_000_000
    name = f"Check{customer_id}"
    spark = spark_session()
    try:
        insert_customer(customer_id, name)
        server = server_name()
        console.print(f"inserted customer {customer_id} ({name}) into {server}; waiting for it downstream …")
        seen = wait_landed(spark, customer_id, name, args.timeout)
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/]")
        return 1
    finally:
        spark.stop()
    table = Table(title=f"a row written to {server}, seen downstream")
    for column in ("where", "after"):
        table.add_column(column)
    for where, seconds in seen.items():
        table.add_row(where, f"{seconds:.1f} s")
    console.print(table)
    down = " ".join(["docker-compose", *(f"-f {file}" for file in args.files or ()), "down"])
    console.print(f"the pipeline is up: the console is on http://localhost:8080; `{down}` stops it "
                  "(`down -v` also wipes its volumes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
