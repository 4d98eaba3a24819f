"""The docs as tests: every command of docs/quickstart.md, docs/sink.md, docs/streams.md,
docs/connect.md and docs/registry.md runs as written, in order, against real servers (the ones the docs start), and
prints what the docs say it prints. The Markdown is the test's input (tests/docs/doc_steps.py has
the convention); a changed doc changes the test.

The default variant runs every step but those labelled `slow` (they need Spark: the sink, the
queries over its tables, `binlake demo`); `pytest -m slow` runs the docs whole. Each shell runs in
namespaces of its own (tests/docs/terminal.py), so fixed ports and /tmp paths collide with nothing.
"""

from __future__ import annotations

import re
import time

import pytest

from testkit.brokerproc import ROOT
from doc_steps import Step, after, steps
from terminal import Job, Terminal

DOCS = ("docs/quickstart.md", "docs/sink.md", "docs/streams.md", "docs/connect.md", "docs/registry.md")
READY_WAIT_S = 240   # a background command's start (Spark's: a minute or two on two shared cores)
OUTPUT_WAIT_S = 180  # until a command prints what its doc says (a change travelling to the warehouse)


def shells() -> dict[str, list[str]]:
    """The docs run in each shell, by the first one's name: a doc that continues another's shell
    (`<!-- doctest: after ... -->`) runs after it."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        previous = after(ROOT / doc)
        owner = next((first for first, docs in found.items() if previous in docs), None) if previous else None
        if previous and owner is None:
            raise AssertionError(f"{doc} continues {previous}, which is not before it in {DOCS}")
        found.setdefault(owner or doc, []).append(doc)
    return found


SHELLS = shells()


def test_every_doc_follows_the_convention_and_has_commands_to_run():
    for docs in SHELLS.values():
        for doc in docs:
            assert any(s.kind == "run" for s in steps(ROOT / doc, doc)), f"{doc}: no command to run"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("docs", SHELLS.values(), ids=["+".join(d.removeprefix("docs/") for d in docs)
                                                       for docs in SHELLS.values()])
def test_the_docs_run_as_written(docs):
    run_docs(docs, slow=False)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # (four demos, then Spark in the quickstart's pipeline)
@pytest.mark.parametrize("docs", SHELLS.values(), ids=["+".join(d.removeprefix("docs/") for d in docs)
                                                       for docs in SHELLS.values()])
def test_the_docs_run_as_written_with_spark(docs):
    run_docs(docs, slow=True)


def run_docs(docs: list[str], slow: bool) -> None:
    todo = [s for doc in docs for s in steps(ROOT / doc, doc) if slow or not s.slow]
    terminal = Terminal()
    try:
        for n, step in enumerate(todo):
            expected = todo[n + 1] if n + 1 < len(todo) and todo[n + 1].kind == "output" else None
            if step.kind == "background":
                wait_ready(terminal, terminal.start(step.text), step)
            elif step.kind == "run":
                run_step(terminal, step, expected)
    finally:
        terminal.close()


def run_step(terminal: Terminal, step: Step, expected: Step | None) -> None:
    status, output = terminal.run(step.text, step.typed)
    if expected is None:
        if status != 0:
            fail(terminal, step, f"exited {status}:\n{output[-4000:]}")
        return
    deadline = time.monotonic() + OUTPUT_WAIT_S
    while status != 0 or not shows(output, expected.text):
        if time.monotonic() > deadline:
            fail(terminal, step, f"did not print what {expected.where} says within {OUTPUT_WAIT_S} s; it "
                                 f"exited {status} and printed:\n{output[-4000:]}\n--- expected:\n{expected.text}")
        time.sleep(1)
        status, output = terminal.run(step.text, step.typed)


def shows(output: str, expected: str) -> bool:
    """Each expected line, whitespace collapsed, found in the output, in order."""
    text = "\n".join(" ".join(line.split()) for line in output.splitlines())
    at = 0
    for line in expected.splitlines():
        found = text.find(" ".join(line.split()), at)
        if found < 0:
            return False
        at = found + len(" ".join(line.split()))
    return True


def wait_ready(terminal: Terminal, job: Job, step: Step) -> None:
    deadline = time.monotonic() + READY_WAIT_S
    while step.until not in job.output():
        if not job.running():
            fail(terminal, step, f"ended before printing {step.until!r}")
        if time.monotonic() > deadline:
            fail(terminal, step, f"did not print {step.until!r} within {READY_WAIT_S} s")
        time.sleep(0.2)


def fail(terminal: Terminal, step: Step, what: str) -> None:
    logs = "\n".join(f"--- {job.command!r} ({'running' if job.running() else 'ended'}), the end of its output:\n"
                     f"{tail(job.output())}" for job in terminal.jobs)
    pytest.fail(f"{step.where}: {step.text!r} {what}\n{logs}", pytrace=False)


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(re.sub(r"\s+$", "", line) for line in text.splitlines()[-lines:])
