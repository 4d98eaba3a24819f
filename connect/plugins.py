"""Plugin discovery: connector names resolve through the entry-point group `binlake.connectors`.

A distribution registers a connector in its pyproject.toml:

    [project.entry-points."binlake.connectors"]
    mysql = "cdc.connector:MySqlConnector"

`connector:` in a config is that name, or a `module:Class` reference (handy for plugins that are
not installed as distributions, e.g. in tests).
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points

from pydantic import BaseModel

from .api import Connector, SinkConnector, SourceConnector

GROUP = "binlake.connectors"


class PluginError(Exception):
    """The connector named in a config cannot be found or is not a valid plugin."""


def installed() -> dict[str, str]:
    """Installed plugin names and the `module:attr` each points at."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load(name: str) -> type[Connector]:
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            plugin = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"cannot load connector class {name!r}: {exc}") from None
    else:
        found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not found:
            names = sorted(installed())
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PluginError(f"no connector plugin named {name!r}; {hint}installed: {', '.join(names) or 'none'} "
                              f"(entry-point group {GROUP}, or give a module:Class reference)")
        try:
            plugin = found[0].load()
        except Exception as exc:  # a broken plugin must not look like a missing one
            raise PluginError(f"connector plugin {name!r} ({found[0].value}) failed to import: {exc!r}") from exc
    check(name, plugin)
    return plugin


def check(name: str, plugin: object) -> None:
    """Refuse classes that do not implement the connector API, with the reason."""
    if not (isinstance(plugin, type) and issubclass(plugin, (SourceConnector, SinkConnector))):
        raise PluginError(f"{name!r} is {plugin!r}, not a SourceConnector or SinkConnector subclass")
    model = getattr(plugin, "config_model", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginError(f"connector {name!r} declares no pydantic config_model")
    if model.model_config.get("extra") != "forbid":
        raise PluginError(f"connector {name!r}: config_model {model.__name__} must reject unknown keys "
                          "(subclass connect.api.ConnectorConfig)")
    if not isinstance(getattr(plugin, "task_class", None), type):
        raise PluginError(f"connector {name!r} declares no task_class")
