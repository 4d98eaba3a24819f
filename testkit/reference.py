"""The reference implementations on this machine: Apache Kafka's broker (KRaft), its Java tools and
Kafka Connect, run from the jars `make reference` copies out of Maven Central (bench/reference/pom.xml).

binlake is held against them: Kafka's own tools and Java client run against logcore (tests/reference),
and the platform runs against Apache Kafka. Like `sandbox.sql` for MariaDB, each Apache Kafka here
has its own directory and free loopback ports and lives as long as its owner.

    result = run_tool("kafka-topics", "--bootstrap-server", addr, "--list")
    kafka = start_kafka(Path("/tmp/k"))               # single node, broker and controller in one JVM
    kafka.address                                     # "127.0.0.1:PORT"
    kafka.stop()
    connect = start_connect(Path("/tmp/c"), kafka.address, connectors=[{...}])   # standalone

A replicated Apache Kafka (three KRaft nodes, on loopback or in network namespaces): testkit/kraft.py.

By hand: `python -m testkit.reference DIR [--port N]` runs one Apache Kafka until Ctrl-C.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from common.lifetime import die_with_parent
from sandbox.process import (SandboxError, end_process, foreground_command, free_port, port_answers,
                             wait_until_ready)

ROOT = Path(__file__).resolve().parent.parent
JAVA = "/usr/bin/java"
START_TIMEOUT_S = 120
# Short-lived tools start faster with the first JIT tier only and a small serial heap.
TOOL_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
# The JVM's own log (class sharing's notices among them) goes to stderr at warning level: stdout is the tool's.
JVM_LOG_TO_STDERR = ["-Xlog:disable", "-Xlog:all=warning:stderr"]
ARCHIVES = ROOT / ".cache" / "jvm-archives"  # class_archive()'s, one per checkout
QUIET_LOG4J = """status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""
FILE_LOG4J = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
"""


# Kafka's bin/*.sh scripts and the main class each runs (kafka-run-class.sh CLASS).
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-share-consumer": "org.apache.kafka.tools.VerifiableShareConsumer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-transactional-message-copier": "org.apache.kafka.tools.TransactionalMessageCopier",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-share-consumer-perf-test": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
}


class MissingReference(SandboxError):
    """The reference jars are not in the cache: the message names the make target that fetches them."""


def jar_dir() -> Path:
    return Path(os.environ.get("BINLAKE_REFERENCE_JARS", ROOT / ".cache" / "reference-jars"))


def available() -> bool:
    return (jar_dir() / ".fetched").exists() and Path(JAVA).exists()


def classpath() -> str:
    if not available():
        raise MissingReference(f"Apache Kafka's jars are not in {jar_dir()}; run `make reference` "
                               f"(Maven fetches them from Maven Central, bench/reference/pom.xml)")
    return f"{jar_dir()}/*"


APICURIO = {"2": "apicurio", "3": "apicurio3"}  # Apicurio's line: its jars' directory in the reference cache


def apicurio_classpath(line: str = "2") -> str:
    """The reference classpath with Apicurio Registry's serdes (and, for 2.x, its Connect converter) after it
    (bench/reference/apicurio/pom.xml, .../v3/pom.xml: the jars the reference already holds are left out)."""
    jars = jar_dir() / APICURIO[line]
    if not (jars / ".fetched").exists():
        raise MissingReference(f"Apicurio Registry's {line}.x serdes are not in {jars}; run `make reference` "
                               f"(Maven fetches them from Maven Central, bench/reference/apicurio/)")
    return f"{classpath()}:{jars}/*"


def apicurio_converter(url: str) -> dict[str, str]:
    """A Connect worker's settings for Apicurio's AvroConverter (2.x, on apicurio_classpath()) for keys and
    values, writing and reading Confluent's framing with the contentId; `url`: the registry's `/apis/registry/v2`."""
    settings = {"apicurio.registry.url": url, "apicurio.registry.auto-register": "true",
                "apicurio.registry.as-confluent": "true", "apicurio.registry.use-id": "contentId",
                "apicurio.registry.headers.enabled": "false"}
    return {f"{side}.converter": "io.apicurio.registry.utils.converter.AvroConverter" for side in ("key", "value")} | {
        f"{side}.converter.{key}": value for side in ("key", "value") for key, value in settings.items()}


def _quiet_log4j() -> Path:
    """Tools log warnings to stderr only (their output is what callers read)."""
    path = jar_dir() / "log4j2-tools.properties"
    if not path.exists():
        path.write_text(QUIET_LOG4J)
    return path


def class_archive() -> Path:
    """The tools' class-data-sharing archive (the JDK's dynamic AppCDS): the classes a tool loads, parsed
    once and mapped by every later tool, which then starts in about half the time (a JVM start is most of
    a short tool's run). Named after the jars and the JVM it was made with, so another set of either makes
    another archive (a JVM also refuses, and ignores, an archive that does not match it)."""
    classpath()  # (MissingReference if there are no jars)
    java = Path(JAVA).resolve()
    made_of = f"{jar_dir().resolve()} {(jar_dir() / '.fetched').stat().st_mtime_ns} {java} {java.stat().st_mtime_ns}"
    return ARCHIVES / f"kafka-tools-{hashlib.sha256(made_of.encode()).hexdigest()[:16]}.jsa"


def tool_command(tool: str, *args: str, jvm: list[str] | None = None, write_archive: Path | None = None) -> list[str]:
    """The command line that runs one of Kafka's Java tools: a script's name from TOOLS, or a main class.
    With the default JVM options it maps the class archive if there is one, or writes one to
    `write_archive` at its exit (run_tool's first run)."""
    if jvm is None:
        archive = class_archive()
        sharing = [f"-XX:ArchiveClassesAtExit={write_archive}"] if write_archive else \
            [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
        jvm = [*TOOL_JVM, *sharing, *JVM_LOG_TO_STDERR]
    return [JAVA, *jvm, f"-Dlog4j2.configurationFile={_quiet_log4j()}",
            "-cp", classpath(), TOOLS.get(tool, tool), *args]


def run_tool(tool: str, *args: str, timeout: float = 120, input: str | None = None,
             jvm: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run a tool to its end; its exit code, stdout and stderr are the caller's to check. The first run
    with the default JVM options that exits 0 writes the class archive (to a name of its own, renamed
    once whole: two first runs at once leave one complete archive)."""
    archive = class_archive() if jvm is None else None
    writing = archive.with_name(f"{archive.name}.{os.getpid()}.tmp") if archive and not archive.exists() else None
    if writing:
        ARCHIVES.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(tool_command(tool, *args, jvm=jvm, write_archive=writing), capture_output=True,
                                text=True, timeout=timeout, input=input,
                                stdin=None if input is not None else subprocess.DEVNULL)
        if writing and writing.exists() and result.returncode == 0:
            os.replace(writing, archive)
        return result
    finally:
        if writing:
            writing.unlink(missing_ok=True)


@dataclass
class ApacheKafka:
    """An Apache Kafka node in KRaft mode (broker and controller in one process) on a formatted log
    directory; `kill` and `start` SIGKILL it and bring it back on the same data and port. `host` is
    the address it listens on, `prefix` a command it runs under (`ip netns exec NS` puts it in a
    network namespace, testkit/kraft.py)."""

    base: Path
    port: int
    controller_port: int
    heap: str = "1g"
    proc: subprocess.Popen | None = None
    host: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    def start(self) -> "ApacheKafka":
        """Start the server; returns once it has registered with its controller and listens."""
        self.wait_until(self.launch())
        return self

    def launch(self) -> int:
        """Start the process and return at once (a node of a quorum cannot finish starting alone):
        the log's size before it, for `wait_until`."""
        log4j = self.base / "log4j2.properties"
        log4j.write_text(FILE_LOG4J.format(path=self.log_path))
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.base / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, JAVA, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC",
                 f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(), "kafka.Kafka",
                 str(self.base / "server.properties")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=partial(die_with_parent, os.getpid()))
        return seen

    def wait_until(self, seen: int, started: bool = True) -> None:
        """Wait until the server has logged "Kafka Server started" since `seen` and its port answers
        (with `started` false: until the port answers); SIGKILL it if it exits or times out first."""
        def ready() -> bool:
            return (not started or self._started_since(seen)) and port_answers(self.port, host=self.host)
        wait_until_ready(self.proc, ready, f"Apache Kafka on {self.address}", START_TIMEOUT_S,
                         lambda: _tail(self), interval_s=0.2, stop=self.kill)

    def _started_since(self, offset: int) -> bool:
        if not self.log_path.exists():
            return False
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return b"Kafka Server started" in log.read()

    def describe(self) -> str:
        return f"Apache Kafka on {self.address} (KRaft, one node); log {self.log_path}"

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, no flush."""
        end_process(self.proc)

    def stop(self, remove: bool = True) -> None:
        """SIGTERM (Kafka's controlled shutdown), or SIGKILL after 60 s; then remove its files."""
        end_process(self.proc, 60)
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)


def server_properties(base: Path, port: int, controller_port: int, extra: dict[str, str],
                      host: str = "127.0.0.1") -> str:
    """Kafka's defaults, but for one node: internal topics with one replica, no initial rebalance delay.
    `extra` adds or overrides settings (a quorum's node.id and controller.quorum.voters, say)."""
    settings = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(base / "logs"),
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        **extra,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def new_cluster_id() -> str:
    cluster_id = "-"
    while cluster_id.startswith("-"):  # the tool would read it as an option (Kafka's Uuid.randomUuid skips these too)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return cluster_id


def format_storage(properties: Path, cluster_id: str) -> None:
    """`kafka-storage format`: the log directories named in `properties`, for cluster `cluster_id`."""
    formatted = run_tool("kafka-storage", "format", "-t", cluster_id, "-c", str(properties))
    if formatted.returncode != 0:
        raise SandboxError(f"formatting Apache Kafka's log directory failed:\n{formatted.stdout}{formatted.stderr}")


def start_kafka(base: Path, port: int | None = None, config: dict[str, str] | None = None,
                heap: str = "1g") -> ApacheKafka:
    """Format a new log directory under `base` and start Apache Kafka on it. `config` adds or
    overrides server.properties settings."""
    base.mkdir(parents=True, exist_ok=True)
    kafka = ApacheKafka(base, port or free_port(), free_port(), heap)
    properties = base / "server.properties"
    properties.write_text(server_properties(base, kafka.port, kafka.controller_port, config or {}))
    format_storage(properties, new_cluster_id())
    return kafka.start()


def _tail(process: "ApacheKafka | ConnectWorker") -> str:
    text = "".join(p.read_text(errors="replace") for p in (process.base / "stdout.log", process.log_path) if p.exists())
    return text[-4000:]


# -- Kafka Connect -------------------------------------------------------------------------------------

@dataclass
class ConnectWorker:
    """A running Kafka Connect worker (standalone or distributed) with its REST API on `rest_port`."""

    base: Path
    rest_port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        """One call to the REST API: (HTTP status, its JSON body decoded, else its text or None)."""
        request = urllib.request.Request(self.url + path, method=method, data=None if body is None else
                                         json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, _body(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _body(exc.read())

    def task_states(self, connector: str) -> list[str]:
        """The state of each task of `connector` (RUNNING, FAILED, ...); empty while it has none."""
        status, body = self.rest("GET", f"/connectors/{connector}/status")
        return [task["state"] for task in body.get("tasks", [])] if status == 200 else []

    def stop(self, remove: bool = True) -> None:
        """SIGTERM (the worker stops its tasks and commits their offsets), or SIGKILL after 60 s."""
        end_process(self.proc, 60)
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)


def _body(text: bytes) -> object:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text.decode(errors="replace")  # the server's own error page, before REST is up


def start_connect(base: Path, bootstrap: str, worker: dict[str, str] | None = None,
                  connectors: list[dict[str, str]] | None = None, jars: str | None = None) -> ConnectWorker:
    """Start a Kafka Connect worker against `bootstrap` (logcore or Apache Kafka). With `connectors`
    it runs standalone, those connectors' properties as its arguments and its offsets in a file;
    without, it runs distributed (`worker` names group.id and the three storage topics) and takes
    connectors through its REST API. JSON converters without schemas, as binlake's connector writes.
    `jars`: the worker's classpath, when not the reference's (apicurio_classpath())."""
    base.mkdir(parents=True, exist_ok=True)
    rest_port = free_port()
    settings = {
        "bootstrap.servers": bootstrap, "listeners": f"http://127.0.0.1:{rest_port}",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
        "offset.flush.interval.ms": "1000", "plugin.discovery": "service_load",
        **({"offset.storage.file.filename": str(base / "offsets")} if connectors is not None else {}),
        **(worker or {}),
    }
    (base / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    files = []
    for i, connector in enumerate(connectors or []):
        files.append(base / f"connector-{i}.properties")
        files[-1].write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
    main = "org.apache.kafka.connect.cli.ConnectStandalone" if connectors is not None \
        else "org.apache.kafka.connect.cli.ConnectDistributed"
    log_path = base / "connect.log"
    log4j = base / "log4j2.properties"
    log4j.write_text(FILE_LOG4J.format(path=log_path))
    with open(base / "stdout.log", "ab") as out:
        proc = subprocess.Popen([JAVA, "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", jars or classpath(),
                                 main, str(base / "worker.properties"), *map(str, files)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=partial(die_with_parent, os.getpid()))
    connect = ConnectWorker(base, rest_port, proc, log_path)

    def answers() -> bool:  # ready once its REST API answers
        try:
            return connect.rest("GET", "/connectors")[0] == 200
        except OSError:
            return False
    wait_until_ready(proc, answers, "Kafka Connect", START_TIMEOUT_S, lambda: _tail(connect), interval_s=0.2,
                     stop=lambda: connect.stop(remove=False))
    return connect


main = foreground_command(start_kafka, "Run a throwaway single-node Apache Kafka (its files in BASE) until Ctrl-C, then "
                                       "remove them.", port_help="broker port on 127.0.0.1  [default: a free one]")


if __name__ == "__main__":
    main()
