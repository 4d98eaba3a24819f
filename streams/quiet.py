"""The worker's quiet default (docs/streams.md, "What the worker prints").

faust prints a banner, then every service of the app logs "Starting..." (and at the end
"Stopping..."), aiokafka its group protocol, faust its subscriptions and assignments as tables:
about 160 lines before "Ready" for the examples, and an agent's crash traceback among 70 lines of
shutdown. Quiet, the worker leaves out faust's banner and lets faust, mode, aiokafka and binlake's
faust classes log warnings and errors only (tracebacks included); it says itself, in one line each,
when it is ready and which partitions it was given. The app's own loggers log at `-l` (default
info). `-v` gives faust's output back whole.
"""

from __future__ import annotations

import logging

# Libraries whose INFO lines are the start-up and shutdown chatter ("streams": binlake's faust classes).
CHATTY = ("faust", "mode", "aiokafka", "streams")
log = logging.getLogger("binlake.streams")


def faust_argv(reference: str, args: list[str], verbose: bool) -> list[str]:
    """faust's command line for the worker: `-l info` unless a level is given; quiet (`--quiet`:
    no banner) unless `verbose`."""
    given = any(a in ("-l", "--loglevel") or a.startswith("--loglevel=") or (a.startswith("-l") and len(a) > 2)
                for a in args)
    return [reference, *([] if verbose else ["--quiet"]), "worker", *([] if given else ["-l", "info"]), *args]


def quieten(app) -> None:
    """Warnings and errors only from the libraries; a line when the worker is ready, and at each
    assignment."""
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)

    async def say_assigned(sender, assigned, **kwargs) -> None:  # (faust's signals pass the sender first)
        log.info("%s: assigned %s", app.conf.id, describe(assigned))

    app.on_partitions_assigned.connect(say_assigned)


def announcing(worker_class: type) -> type:
    """faust's Worker, saying in one line when it is ready (its own "Ready" is an INFO line of faust's)."""
    class Worker(worker_class):
        async def on_startup_finished(self) -> None:
            await super().on_startup_finished()
            conf = self.app.conf
            log.info("%s ready (%s, brokers %s)", conf.id, conf.processing_guarantee.value,
                     ",".join(str(url.authority) for url in conf.broker))

    return Worker


def describe(partitions) -> str:
    """`orders [0, 1], customers [0]` for a set of TopicPartitions; `nothing` for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(f"{topic} {sorted(p)}" for topic, p in sorted(by_topic.items())) or "nothing"
