"""Connector config files: YAML, `${VAR}` interpolation, validation with every problem reported.

One file configures one connector. The runtime's own keys (`RuntimeConfig`) are validated here; all
other top-level keys belong to the plugin and are validated by the plugin's `config_model`, and
both sets of problems are reported together, each with its path:

    shop.yaml: 2 problems
      database.prot: unknown key; did you mean 'port'?
      snapshot: Input should be 'initial', 'initial_only', 'when_needed' or 'no_data' (got 'inital')
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from common import yamlfile
from common.kafka_security import KafkaSecurity

from . import plugins
from .api import Connector, ConnectorConfig
from .transforms import TransformConfig


class ConfigError(Exception):
    """A config file is wrong; `problems` are (path, message) pairs, all of them, not just the first."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = [f"  {path}: {message}" if path else f"  {message}" for path, message in problems]
        super().__init__(f"{source}: {count}\n" + "\n".join(lines))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OffsetsConfig(_Strict):
    topic: str = "binlake-offsets"
    """Compacted topic holding source offsets; key = JSON [connector, source partition]."""
    partitions: int = Field(25, ge=1)
    replication_factor: int | None = Field(None, ge=1)
    """None: min(3, brokers in the cluster)."""


class RestartConfig(_Strict):
    initial_backoff_ms: int = Field(1000, ge=1)
    max_backoff_ms: int = Field(60_000, ge=1)
    multiplier: float = Field(2.0, ge=1.0)
    max_restarts: int | None = Field(None, ge=0)
    """None: restart forever; otherwise the task is left FAILED after that many restarts in a row."""

    @model_validator(mode="after")
    def _ordered(self) -> "RestartConfig":
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ValueError(f"max_backoff_ms ({self.max_backoff_ms}) is below initial_backoff_ms "
                             f"({self.initial_backoff_ms})")
        return self

    def backoff_ms(self, failures: int) -> float:
        """Delay before restart number `failures` (1-based): initial * multiplier^(n-1), capped."""
        return min(self.initial_backoff_ms * self.multiplier ** (failures - 1), self.max_backoff_ms)


class ProducerConfig(_Strict):
    compression_type: Literal["gzip", "snappy", "lz4", "zstd"] | None = None
    linger_ms: int = Field(5, ge=0)
    max_batch_size: int = Field(1 << 20, ge=1024)
    request_timeout_ms: int = Field(30_000, ge=1)
    transaction_timeout_ms: int = Field(60_000, ge=1)


class RuntimeConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,200}$")
    connector: str
    bootstrap_servers: str | list[str]
    security: KafkaSecurity = KafkaSecurity()
    """How the runtime's clients reach the brokers: TLS and SASL (common/kafka_security.py)."""
    delivery: Literal["exactly_once", "at_least_once"] = "exactly_once"
    commit_interval_ms: int | None = Field(None, ge=0)
    """How long batches collect before their offsets are committed. None: 0 for exactly_once (one
    transaction per batch), 1000 for at_least_once. Larger: fewer, bigger transactions / offset writes."""
    group_commit_max_ms: int = Field(500, ge=0)
    """exactly_once: when a commit falls due while the source already holds more batches, they join the
    transaction (fewer commits under load, no delay when idle) until it has been open this long."""
    tasks_max: int = Field(1, ge=1)
    offsets: OffsetsConfig = OffsetsConfig()
    restart: RestartConfig = RestartConfig()
    producer: ProducerConfig = ProducerConfig()
    transforms: list[TransformConfig] = []
    shutdown_timeout_ms: int = Field(30_000, ge=1)
    """On SIGTERM a task gets this long to finish its current batch and commit."""


RUNTIME_KEYS = frozenset(RuntimeConfig.model_fields)


@dataclass(frozen=True)
class ConnectorSpec:
    """A validated config file: runtime settings, the plugin class, and the plugin's own config."""

    runtime: RuntimeConfig
    plugin: type[Connector]
    config: ConnectorConfig
    source: str

    @property
    def name(self) -> str:
        return self.runtime.name

    def public(self) -> dict[str, Any]:
        """The whole config as JSON, secrets (pydantic SecretStr) masked, for the REST API."""
        return {**self.runtime.model_dump(mode="json"), **self.config.model_dump(mode="json")}


# -- loading ---------------------------------------------------------------------------------------

def load(path: str | Path, environ: Mapping[str, str] | None = None) -> ConnectorSpec:
    """Read, interpolate and validate one config file; raises ConfigError listing every problem."""
    return validate(read_mapping(path, "name: ..., connector: ..., ..."), str(path),
                    os.environ if environ is None else environ)


def read_mapping(path: str | Path, example: str) -> dict[str, Any]:
    """The YAML mapping in the file at `path`; ConfigError when it cannot be read or is not a mapping."""
    source = str(path)
    try:
        raw = yamlfile.load(path)
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot read the file: {exc.strerror}")]) from None
    except yamlfile.YamlError as exc:
        raise ConfigError(source, [("", str(exc))]) from None
    if not isinstance(raw, dict):
        raise ConfigError(source, [("", f"the file must be a YAML mapping: {example}")])
    return raw


def validate_model(model: type[BaseModel], raw: dict[str, Any], source: str, environ: Mapping[str, str]):
    """`raw` interpolated and validated as `model`; ConfigError listing every problem."""
    problems: list[tuple[str, str]] = []
    value = _validated(model, interpolate(raw, environ, problems), problems, set())
    if problems:
        raise ConfigError(source, problems)
    return value


def validate(raw: dict[str, Any], source: str, environ: Mapping[str, str]) -> ConnectorSpec:
    unresolved: list[tuple[str, str]] = []
    data = interpolate(raw, environ, unresolved)
    problems: list[tuple[str, str]] = []

    runtime_raw = {k: v for k, v in data.items() if k in RUNTIME_KEYS}
    plugin_raw = {k: v for k, v in data.items() if k not in RUNTIME_KEYS}
    runtime = _validated(RuntimeConfig, runtime_raw, problems, set())

    plugin = None
    if isinstance(data.get("connector"), str):
        try:
            plugin = plugins.load(data["connector"])
        except plugins.PluginError as exc:
            problems.append(("connector", str(exc)))
    config = None
    if plugin is not None:
        config = _validated(plugin.config_model, plugin_raw, problems, set(RUNTIME_KEYS))
    # Validated anyway, so one report lists everything; a key with an unresolved ${VAR} shows only that.
    paths = {path for path, _ in unresolved}
    problems = unresolved + [(path, message) for path, message in problems if path not in paths]
    if problems:
        raise ConfigError(source, problems)
    return ConnectorSpec(runtime, plugin, config, source)


# -- ${VAR} interpolation --------------------------------------------------------------------------

_REFERENCE = re.compile(r"\$(\$)?\{([^}]*)\}")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.S)


def interpolate(data: Any, environ: Mapping[str, str], problems: list[tuple[str, str]], path: str = "") -> Any:
    """Replace `${VAR}` / `${VAR:-default}` in every string value; `$${...}` stays literal `${...}`."""
    if isinstance(data, dict):
        return {k: interpolate(v, environ, problems, _join(path, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate(v, environ, problems, _join(path, i)) for i, v in enumerate(data)]
    if not isinstance(data, str):
        return data

    def substitute(match: re.Match) -> str:
        if match.group(1):
            return match.group(0)[1:]
        variable = _VARIABLE.fullmatch(match.group(2))
        if variable is None:
            problems.append((path, f"bad reference {match.group(0)}: use ${{NAME}} or ${{NAME:-default}}"))
            return ""
        name, default = variable.groups()
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        problems.append((path, f"environment variable {name} is not set "
                               f"(export it, or give a default: ${{{name}:-value}})"))
        return ""

    return _REFERENCE.sub(substitute, data)


# -- validation errors with paths ------------------------------------------------------------------

def _validated(model: type[BaseModel], raw: dict, problems: list[tuple[str, str]], also_known: set[str]):
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems.extend(_describe(model, error, also_known) for error in exc.errors())
        return None


def _describe(model: type[BaseModel], error: dict, also_known: set[str]) -> tuple[str, str]:
    path, siblings = _walk(model, error["loc"])
    kind, given = error["type"], error.get("input")
    if kind == "missing":
        return path, "required key is missing"
    if kind == "extra_forbidden":
        known = siblings | (also_known if len(error["loc"]) == 1 else set())
        close = difflib.get_close_matches(str(error["loc"][-1]), sorted(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(sorted(known))}"
        return path, f"unknown key; {hint}"
    if kind == "union_tag_invalid":
        tags = [t.strip("'") for t in error["ctx"]["expected_tags"].split(", ")]
        close = difflib.get_close_matches(str(error["ctx"]["tag"]), tags, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return _join(path, "type"), f"unknown type {error['ctx']['tag']!r}; {hint}allowed: {', '.join(tags)}"
    if kind == "union_tag_not_found":
        return _join(path, "type"), "required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    if kind == "literal_error" or not isinstance(given, (dict, list)):
        message += f" (got {given!r})"
    return path, message


def _walk(model: type[BaseModel], loc: tuple) -> tuple[str, set[str]]:
    """Turn a pydantic error location into a user path, and list the keys allowed where it ends.

    A discriminated union (transforms) adds the chosen tag to `loc` (transforms.0.filter.field);
    the tag is dropped from the path.
    """
    path, models, parents = "", [model], [model]
    for part in loc:
        parents = models
        if isinstance(part, int):
            path = _join(path, part)
            continue
        if len(models) > 1 and (tagged := [m for m in models if part in _tags(m)]):
            models = tagged
            continue
        models = [found for m in models if part in m.model_fields
                  for found in _models_in(m.model_fields[part].annotation)]
        path = _join(path, part)
    return path, {f.alias or name for m in parents for name, f in m.model_fields.items()}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _tags(model: type[BaseModel]) -> tuple:
    field = model.model_fields.get("type")
    if field is None or typing.get_origin(field.annotation) is not Literal:
        return ()
    return typing.get_args(field.annotation)


def _join(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else str(part)

