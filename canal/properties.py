"""Java `.properties` files, read as `java.util.Properties.load` reads them, and Canal's `${key}` /
`${key:default}` placeholders resolved against the same properties.

Canal's stock files rely on both: `canal.file.data.dir = ${canal.conf.dir}`, a regex written `.*\\\\..*` (one
backslash once unescaped), values with trailing blanks (Canal trims them: so do we, in `resolve`).
"""

from __future__ import annotations

import re
from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=: \t\f"
_PLACEHOLDER = re.compile(r"\$\{([^}:]+)(?::([^}]*))?\}")


class PropertiesError(ValueError):
    """A properties file cannot be read; the message names the file and line."""


def _logical_lines(text: str):
    """(line number, logical line): comments and blank lines dropped, continuations joined."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        yield number, line


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, where: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"{where}: malformed \\uxxxx escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(c, c))
        i += 2
    return "".join(out)


def parse(text: str, source: str = "<string>") -> dict[str, str]:
    """The properties in `text`, in file order (a repeated key: the last one wins, as in Java)."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in _SEPARATORS:
            i += 2 if line[i] == "\\" else 1
        key = line[:i]
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
        while i < len(line) and line[i] in " \t\f":
            i += 1
        where = f"{source}:{number}"
        result[_unescape(key, where)] = _unescape(line[i:], where)
    return result


def load(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PropertiesError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PropertiesError(f"{path} is not UTF-8 text: {exc}") from None
    return parse(text, str(path))


def resolve(properties: dict[str, str]) -> dict[str, str]:
    """Values trimmed and `${key}` / `${key:default}` replaced by other keys' values (nested ones too); an
    unknown key without a default becomes the empty string, as Canal's placeholder configurer leaves it unset."""
    def value_of(key: str, seen: tuple[str, ...]) -> str:
        if key in seen:
            raise PropertiesError(f"{key} refers to itself through ${{...}}: {' -> '.join(seen + (key,))}")
        raw = properties.get(key)
        return None if raw is None else expand(raw.strip(), seen + (key,))

    def expand(value: str, seen: tuple[str, ...]) -> str:
        def substitute(match: re.Match) -> str:
            found = value_of(match.group(1).strip(), seen)
            return found if found is not None else (match.group(2) or "")
        return _PLACEHOLDER.sub(substitute, value)

    return {key: value_of(key, ()) for key in properties}
