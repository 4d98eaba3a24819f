"""YAML config files read with limits, for every config binlake takes from a user (connectors, the
Spark sink): at most MAX_BYTES, UTF-8, SafeLoader (no Python objects), no key given twice in one
mapping, at most MAX_VALUES values once aliases are expanded (the "billion laughs"), and no nesting
deeper than Python's recursion can follow. Each refusal is a YamlError saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1024 * 1024
MAX_VALUES = 100_000  # after aliases are expanded: a config is hundreds of values, a YAML bomb billions


class YamlError(ValueError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice (first at line {seen[key].line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load(path: str | Path) -> Any:
    """The document in the file at `path`; YamlError (or OSError when it cannot be read)."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YamlError(f"the file is larger than {MAX_BYTES:,} bytes; is it a config?")
    try:
        return parse(data.decode())
    except UnicodeDecodeError as exc:
        raise YamlError(f"not UTF-8 text: {exc}") from None


def parse(text: str) -> Any:
    """safe_load with the limits above: the document is composed first and measured before any
    value is built from it."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values = _expanded_size(node, {})
        if values > MAX_VALUES:
            raise YamlError(f"the YAML expands to {values:,} values through its aliases (*name), more than "
                            f"{MAX_VALUES:,}: write the repeated parts out or use fewer aliases")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlError("the YAML nests too deeply to be a config") from None
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values `node` stands for once every alias is copied out (each node counted once
    per reference; memoized, so a bomb costs as little to measure as to compose)."""
    if id(node) in sizes:
        return sizes[id(node)]
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, sizes) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
    sizes[id(node)] = size
    return size
