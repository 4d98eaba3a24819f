"""The mysql connector's source in a process of its own.

Reading the binlog, decoding rows and building change events is about two thirds of the connector's
CPU; the producer (record batches, requests, the socket) is the rest. In one Python process both
halves share one core (the GIL). Here `MySqlSource` runs in a child process and sends its batches to
the connector's process, so the two halves run on two cores (bench/cdc_pipeline.py).

Children are forked from multiprocessing's fork server, started by `warm_up()` when the connector is
loaded: the server imports the source's modules (SQLAlchemy, the binlog reader: a third of a second,
more on a busy machine) beside the connect process's own start, so a task attempt's source process
is ready at once. The server has no threads and no sockets of the connect process, so forking it is
safe; it exits when the connect process does, and its children die with it. `begin` hands a child
what to run.

Messages on a duplex pipe, parent → child: ("begin", config, history topic, stored history, offset),
then answers to the child's questions. Child → parent:
    ("batch", columns, offset, ends_transaction)   columns: the records' topics, keys, values and
                                                partitions, four lists; the schema history recorded
                                                since the last batch first
    ("partitions", topic)                       how many partitions has `topic` (created if missing)?
                                                The parent answers with the count.
    ("metrics", gauges, details)                the source's gauges, every METRICS_EVERY_S, and its details
                                                (the incremental snapshot's progress) for the REST status
    ("end",)                                    the source finished
    ("error", exception)                        the source failed (the child's traceback in its notes)
Signals (cdc.signals.Signal, from the REST API or the signal topic, with their topic position) go parent →
child on a one-way pipe of their own, read by a thread of the child, since they come at any time. Records travel as columns: pickling slotted dataclasses costs nine times as much.

A child dies with the fork server (PR_SET_PDEATHSIG), and so with the connect process, and is killed
on stop: what it read but did not hand over is read again from the committed offset by the next attempt.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import pickle
import threading
import time
import traceback
from collections.abc import Callable, Iterator

from cdc.config import SourceConfig
from cdc.records import Batch, Record
from common.lifetime import die_with_parent

METRICS_EVERY_S = 1.0
_CONTEXT = multiprocessing.get_context("forkserver")


def warm_up() -> None:
    """Start the fork server now, the source's modules imported in it (idempotent)."""
    _CONTEXT.set_forkserver_preload(["cdc.source", "cdc.schema.history", "cdc.source_process"])
    multiprocessing.forkserver.ensure_running()


class SourceProcess:
    """Parent side. `batches()` runs in one thread of the parent (it blocks on the pipe); `partitions`
    is called from that thread."""

    def __init__(self, name: str) -> None:
        self.metrics: dict[str, float] = {}
        self.details: dict = {}
        self._partitions: Callable[[str], int] | None = None
        self._stopped = False
        root = logging.getLogger()
        log_format = root.handlers[0].formatter._fmt if root.handlers and root.handlers[0].formatter else None
        warm_up()
        self._conn, child = _CONTEXT.Pipe()
        signals_in, self._signals = _CONTEXT.Pipe(duplex=False)   # (signals: a pipe of their own, any time)
        self._process = _CONTEXT.Process(target=_serve, name=name, daemon=True,
                                         args=(child, root.level, log_format, signals_in))
        self._process.start()
        child.close()
        signals_in.close()

    def begin(self, config: SourceConfig, history_topic: str, stored_history: list[bytes | None],
              offset: dict | None, partitions: Callable[[str], int]) -> None:
        self._partitions = partitions
        self._conn.send(("begin", config, history_topic, stored_history, offset))

    def batches(self) -> Iterator[Batch]:
        """The child's batches, in order; raises what the child raised."""
        conn = self._conn
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if self._stopped:
                    return
                self._process.join(5)
                raise RuntimeError(f"the source process exited unexpectedly (exit code {self._process.exitcode})"
                                   ) from None
            kind = message[0]
            if kind == "batch":
                _, columns, offset, ends_transaction = message
                yield Batch(list(map(Record, *columns)), offset, ends_transaction)
            elif kind == "partitions":
                conn.send(self._partitions(message[1]))
            elif kind == "metrics":
                self.metrics, self.details = message[1], message[2]
            elif kind == "end":
                return
            else:
                raise message[1]

    def signal(self, signal, position: tuple[int, int] | None = None) -> None:
        """Hand a signal (cdc.signals.Signal) to the running source, from any thread; `position`: its
        (partition, offset) in the signal topic."""
        self._signals.send((signal, position))

    def stop(self) -> None:
        self._stopped = True
        self._process.kill()
        self._process.join()
        self._conn.close()


def _serve(conn: multiprocessing.connection.Connection, log_level: int, log_format: str | None,
           signals: multiprocessing.connection.Connection) -> None:
    """Child side: run the source and send what it yields."""
    die_with_parent(os.getppid())   # (the fork server, which exits with the connect process)
    logging.basicConfig(level=log_level, **({"format": log_format} if log_format else {}))
    from cdc.schema.history import TopicHistoryStore
    from cdc.source import MySqlSource

    _, config, history_topic, stored_history, offset = conn.recv()

    sending = threading.Lock()

    def send(message: tuple) -> None:
        with sending:
            conn.send(message)

    def partitions(topic: str) -> int:
        send(("partitions", topic))
        return conn.recv()   # (only this thread receives)

    history = TopicHistoryStore(history_topic, stored_history)
    try:
        source = MySqlSource(config, history, offset, partitions=partitions)
        threading.Thread(target=_report_metrics, args=(source, send), name="source-metrics", daemon=True).start()
        threading.Thread(target=_receive_signals, args=(source, signals), name="source-signals", daemon=True).start()
        with contextlib.closing(source.batches()) as batches:   # closed: a snapshot's connections too
            for batch in batches:
                records = batch.records
                if recorded := history.take():
                    records = recorded + records
                columns = ([r.topic for r in records], [r.key for r in records], [r.value for r in records],
                           [r.partition for r in records])
                send(("batch", columns, batch.offset, batch.ends_transaction))
        send(("end",))
    except BaseException as exc:  # noqa: BLE001 (everything goes to the parent, which decides)
        send(("error", _portable(exc)))


def _receive_signals(source, signals: multiprocessing.connection.Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        while True:
            source.incremental.offer(*signals.recv())


def _report_metrics(source, send: Callable[[tuple], None]) -> None:
    while True:
        time.sleep(METRICS_EVERY_S)
        try:
            send(("metrics", source.metrics(time.time()), {"incremental_snapshot": source.incremental.status()}))
        except Exception:
            logging.getLogger(__name__).exception("reading the source's metrics failed")


def _portable(exc: BaseException) -> BaseException:
    """`exc` as the parent can unpickle it, with this process's traceback as a note."""
    exc.add_note("in the source process:\n" + "".join(traceback.format_exception(exc)))
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        portable = RuntimeError(f"{type(exc).__name__}: {exc}")
        portable.__notes__ = exc.__notes__
        return portable
