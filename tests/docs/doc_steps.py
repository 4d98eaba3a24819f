"""The steps a doc's fenced code blocks ask a reader to take, as tests/docs/test_docs.py runs them.

The convention, in a block's info string (the language first, then labels; Markdown renderers
show only the language):

    ```sh                          commands to run in order, in one shell; each must exit 0
    ```sh background until="TEXT"  commands that keep running (a server, a worker: "in a terminal of
                                   its own"); the next step waits until one's output shows TEXT
    ```text output                 what the command before it prints: each line, whitespace
                                   collapsed, is found in its output, in order; until it is, the
                                   command runs again (so such a command only reads)
    ```sh synopsis                 usage, with placeholders: not run
    slow                           (a label of any of the above) the step needs Spark: run only by
                                   the `slow` variant of the test, with the output blocks after it
    docker                         needs Docker and this machine's network: not run here (the compose
                                   demo is tests/test_compose_up.py's)

In a command block a line ending in `\\` or inside quotes continues on the next, a heredoc (`<<'EOF'`) takes its lines
up to its end word, and lines starting with `>>> ` are typed into the command before them on a
terminal (an interactive shell such as pyspark); the last one ends it (`>>> exit()`). Blocks of other languages (yaml, python,
sql, text without `output`) show files, code or output, and are not run.

A doc whose first lines hold `<!-- doctest: after docs/X.md -->` continues X's shell: its commands
run after X's, with X's servers still running.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

COMMAND_LANGUAGES = {"sh"}
LABELS = {"background", "output", "synopsis", "slow", "docker"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>.*)$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")
_AFTER = re.compile(r"<!--\s*doctest:\s*after\s+(?P<doc>\S+)\s*-->")


class DocError(ValueError):
    """A block that breaks the convention, named by file and line."""


@dataclass(frozen=True)
class Step:
    doc: str
    line: int
    kind: str               # "run", "background" or "output"
    text: str               # the command, or the expected lines
    typed: str = ""         # what is typed into the command (`>>> ` lines)
    until: str | None = None
    slow: bool = False

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class Block:
    line: int               # of the opening fence
    language: str
    labels: frozenset[str]
    until: str | None
    body: list[str]


def after(path: Path) -> str | None:
    """The doc whose shell this one continues, if its first lines say so."""
    head = "\n".join(path.read_text().splitlines()[:5])
    match = _AFTER.search(head)
    return match.group("doc") if match else None


def blocks(path: Path, name: str) -> list[Block]:
    lines = path.read_text().splitlines()
    found, n = [], 0
    while n < len(lines):
        fence = _FENCE.match(lines[n])
        if fence is None:
            n += 1
            continue
        start, indent = n, len(fence.group("indent"))
        words = shlex.split(fence.group("info"))
        end = next((i for i in range(n + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise DocError(f"{name}:{start + 1}: a code block that never ends")
        until = next((w.split("=", 1)[1] for w in words[1:] if w.startswith("until=")), None)
        labels = frozenset(w for w in words[1:] if not w.startswith("until="))
        language = words[0] if words else ""
        if language in COMMAND_LANGUAGES | {"text"} and labels - LABELS:
            raise DocError(f"{name}:{start + 1}: unknown label(s) {sorted(labels - LABELS)}; "
                           f"known: {sorted(LABELS)} and until=\"...\" (tests/docs/doc_steps.py)")
        found.append(Block(start + 1, language, labels, until, [line[indent:] for line in lines[n + 1:end]]))
        n = end + 1
    return found


def steps(path: Path, name: str) -> list[Step]:
    """What the doc asks to run and to see, in order (synopsis and docker blocks left out)."""
    found: list[Step] = []
    for block in blocks(path, name):
        slow = "slow" in block.labels
        if block.language == "text" and "output" in block.labels:
            if not found or found[-1].kind != "run":
                raise DocError(f"{name}:{block.line}: an output block must follow a block of commands to run")
            expected = "\n".join(line for line in block.body if line.strip())
            found.append(Step(name, block.line, "output", expected, slow=slow or found[-1].slow))
            continue
        if block.language not in COMMAND_LANGUAGES or block.labels & {"synopsis", "docker"}:
            continue
        background = "background" in block.labels
        if background and not block.until:
            raise DocError(f'{name}:{block.line}: a background block needs until="..." (what its output '
                           f"shows once it is ready for the next step)")
        for line, command, typed in commands(block):
            found.append(Step(name, line, "background" if background else "run", command, typed,
                              block.until if background else None, slow))
    return found


def commands(block: Block) -> list[tuple[int, str, str]]:
    """(line, command, typed) of each command of a block: continuations joined, heredocs kept whole,
    `>>> ` lines typed into the command before them."""
    found: list[tuple[int, str, str]] = []
    body, n = block.body, 0
    while n < len(body):
        line = body[n]
        if not line.strip() or line.lstrip().startswith("#"):
            n += 1
            continue
        if line.startswith(">>> "):
            if not found:
                raise DocError(f"line {block.line + 1 + n}: `>>> ` input with no command before it")
            at, command, typed = found[-1]
            found[-1] = (at, command, typed + line[4:] + "\n")
            n += 1
            continue
        start, parts = n, [line]
        while (parts[-1].endswith("\\") or _open_quote("\n".join(parts))) and n + 1 < len(body):
            n += 1
            parts.append(body[n])
        for heredoc in _HEREDOC.finditer("\n".join(parts)):
            while n + 1 < len(body):
                n += 1
                parts.append(body[n])
                if body[n].strip() == heredoc.group("word"):
                    break
        found.append((block.line + 1 + start, "\n".join(parts), ""))
        n += 1
    return found


def _open_quote(text: str) -> bool:
    """Whether `text` ends inside a quoted string (its command goes on on the next line)."""
    try:
        shlex.split(text.split("<<")[0], comments=True)
    except ValueError:
        return True
    return False
