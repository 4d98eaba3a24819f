"""Where the Spark driver listens. Without SPARK_LOCAL_IP, Spark takes the first non-loopback
address of the machine ("Your hostname ... resolves to a loopback address ...; using 192.0.2.2
instead") and opens its driver and block manager there, to whoever can reach that interface.

The sink picks the address from what it is told to run on: with a local master the executors are
threads of the driver and nothing outside needs to reach it, so loopback; with a cluster master
(spark://host:port, k8s://...) the executors connect back to the driver, so the address of this
machine's interface that routes to the master. A SPARK_LOCAL_IP the user set is kept
(docs/sink.md, "On a Spark cluster").
"""

from __future__ import annotations

import os
import re
import socket

LOOPBACK = "127.0.0.1"
_MASTER_HOST = re.compile(r"^(?:spark|k8s|mesos)://(?:https?://)?\[?([^\]/:,]+)\]?(?::\d+)?")


def driver_address(master: str | None) -> str | None:
    """The address the driver should bind for `master`; None where this machine cannot tell (YARN
    finds its resource manager in the Hadoop configuration): Spark's own choice then."""
    if master is None or master.startswith("local"):
        return LOOPBACK
    match = _MASTER_HOST.match(master)
    return route_to(match.group(1)) if match else None


def route_to(host: str) -> str:
    """The local address this machine's traffic to `host` leaves from (a UDP socket's connect sends nothing)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return probe.getsockname()[0]


def bind_driver(master: str | None) -> str | None:
    """Set SPARK_LOCAL_IP for the driver's JVM (call before it starts), unless it is set already;
    the address the driver will bind."""
    if "SPARK_LOCAL_IP" not in os.environ and (address := driver_address(master)) is not None:
        os.environ["SPARK_LOCAL_IP"] = address
    return os.environ.get("SPARK_LOCAL_IP")
