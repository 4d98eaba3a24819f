"""Canal 1.1.8's stock conf directory (the keys and default values of its canal.properties and
example/instance.properties, in tests/canal/stock/), copied with some keys set: a key is replaced where the stock
file has it, commented out or not, and appended otherwise."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

STOCK = Path(__file__).parent / "canal" / "stock"


def _set(path: Path, keys: dict[str, str]) -> None:
    text = path.read_text()
    for key, value in keys.items():
        line = re.compile(rf"^#?\s*{re.escape(key)}\s*[=:].*$", re.M)
        entry = f"{key} = {value}".replace("\\", "\\\\")
        text, found = line.subn(lambda _: entry, text, count=1)
        if not found:
            text += entry + "\n"
    path.write_text(text)


def conf_dir(where: Path, server: dict[str, str] | None = None, instance: dict[str, str] | None = None,
             destination: str = "example") -> Path:
    """The stock conf directory under `where`, `server` keys set in canal.properties and `instance` keys in
    DESTINATION/instance.properties (values as they read once unescaped: a backslash is written doubled)."""
    conf = where / "conf"
    shutil.copytree(STOCK, conf)
    if destination != "example":
        (conf / "example").rename(conf / destination)
        server = {"canal.destinations": destination, **(server or {})}
    _set(conf / "canal.properties", server or {})
    _set(conf / destination / "instance.properties", instance or {})
    return conf


def add_destination(conf: Path, name: str, instance: dict[str, str]) -> None:
    """Another destination `name` in the conf directory: the stock instance.properties with `instance` set, named
    in canal.destinations."""
    shutil.copytree(STOCK / "example", conf / name)
    _set(conf / name / "instance.properties", instance)
    server = conf / "canal.properties"
    names = re.search(r"^canal\.destinations\s*=\s*(.*)$", server.read_text(), re.M).group(1).strip()
    _set(server, {"canal.destinations": f"{names},{name}" if names else name})
