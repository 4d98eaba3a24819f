"""Where ACLs live. A cluster keeps them in ZooKeeper as Kafka's ZooKeeper mode does: one node per
resource pattern (/kafka-acl/<Type>/<name> for literal names, /kafka-acl-extended/prefixed/<Type>/<name>
for prefixes) holding {"version": 1, "acls": [...]}, and a sequential node under /kafka-acl-changes
after each change, on which every broker reloads. A broker alone keeps them in `acls.json` in its
data directory.

Both hold the whole set in memory for the authorizer, which reads it on every request.
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote, unquote

from ..storage.files import write_atomically
from .acls import AclBinding, AclFilter, PatternType, ResourceType, parse, title

ROOTS = {PatternType.LITERAL: "/kafka-acl", PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
CHANGES = "/kafka-acl-changes"
CHANGES_KEPT = 10  # change notifications left behind (a broker reloads on any of them)


class AclStore(abc.ABC):
    """The set of bindings; `changed` is called (from any thread) whenever it changes."""

    def __init__(self) -> None:
        self.bindings: frozenset[AclBinding] = frozenset()
        self.changed: Callable[[], None] = lambda: None

    def _replace(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings = frozenset(bindings)
        self.changed()

    @abc.abstractmethod
    def start(self) -> None:
        """Load the bindings (the broker calls it once it can reach where they are kept)."""

    @abc.abstractmethod
    def add(self, bindings: list[AclBinding]) -> None: ...

    @abc.abstractmethod
    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; the bindings each removed (a binding two filters match is
        listed under both, as Kafka does)."""


class FileAcls(AclStore):
    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self.path = Path(data_dir) / "acls.json"
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.path.exists():
            self._replace(_from_record(r) for r in json.loads(self.path.read_text()))

    def add(self, bindings: list[AclBinding]) -> None:
        with self._lock:
            self._write(self.bindings | set(bindings))

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        with self._lock:
            removed = [sorted((b for b in self.bindings if f.matches(b)), key=_order) for f in filters]
            self._write(self.bindings - {b for found in removed for b in found})
        return removed

    def _write(self, bindings: frozenset[AclBinding]) -> None:
        write_atomically(str(self.path), json.dumps([_record(b) for b in sorted(bindings, key=_order)]))
        self._replace(bindings)


class ZooKeeperAcls(AclStore):
    def __init__(self, zk) -> None:
        super().__init__()
        self.zk = zk

    def start(self) -> None:
        self.zk.ensure_path(CHANGES)
        self.zk.ChildrenWatch(CHANGES, lambda _children: self.reload())  # (calls it at once, too)

    def reload(self) -> None:
        found = []
        for pattern, root in ROOTS.items():
            for type_name in self._children(root):
                resource_type = parse(ResourceType, type_name)
                for quoted in self._children(f"{root}/{type_name}"):
                    entries, _ = self._read(f"{root}/{type_name}/{quoted}")
                    found += [AclBinding.from_json(resource_type, unquote(quoted), pattern, e) for e in entries]
        self._replace(found)

    def add(self, bindings: list[AclBinding]) -> None:
        for (resource_type, name, pattern), group in _by_resource(bindings).items():
            self._update(resource_type, name, pattern, lambda acls: acls | set(group))
        self._announce()

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        removed = [sorted((b for b in self.bindings if f.matches(b)), key=_order) for f in filters]
        gone = {b for found in removed for b in found}
        for (resource_type, name, pattern), group in _by_resource(gone).items():
            self._update(resource_type, name, pattern, lambda acls: acls - set(group))
        self._announce()
        return removed

    def _update(self, resource_type: ResourceType, name: str, pattern: PatternType,
                change: Callable[[set[AclBinding]], set[AclBinding]]) -> None:
        """Read-modify-write one resource's node, again if another broker changed it meanwhile."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NotEmptyError
        path = f"{ROOTS[pattern]}/{title(resource_type)}/{quote(name, safe='')}"
        while True:
            entries, version = self._read(path)
            acls = change({AclBinding.from_json(resource_type, name, pattern, e) for e in entries})
            data = json.dumps({"version": 1, "acls": [b.to_json() for b in sorted(acls, key=_order)]}).encode()
            try:
                if version is None:
                    if acls:
                        self.zk.create(path, data, makepath=True)
                elif acls:
                    self.zk.set(path, data, version=version)
                else:
                    self.zk.delete(path, version=version)
                return
            except (BadVersionError, NodeExistsError, NotEmptyError):
                continue

    def _announce(self) -> None:
        """Reload here at once (a DescribeAcls right after a change sees it), tell the other brokers,
        drop old notifications."""
        from kazoo.exceptions import NoNodeError
        self.reload()
        self.zk.create(f"{CHANGES}/acl_changes_", b"", sequence=True)
        for old in sorted(self.zk.get_children(CHANGES))[:-CHANGES_KEPT]:
            try:
                self.zk.delete(f"{CHANGES}/{old}")
            except NoNodeError:  # (another broker pruned it)
                pass

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def _read(self, path: str) -> tuple[list[dict], int | None]:
        from kazoo.exceptions import NoNodeError
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return [], None
        return json.loads(data).get("acls", []), stat.version


def _by_resource(bindings: Iterable[AclBinding]) -> dict[tuple, list[AclBinding]]:
    groups: dict[tuple, list[AclBinding]] = {}
    for b in bindings:
        groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return groups


def _order(b: AclBinding) -> tuple:
    return (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission)


def _record(b: AclBinding) -> dict:
    return {"resourceType": title(b.resource_type), "name": b.resource_name, "patternType": title(b.pattern_type),
            **b.to_json()}


def _from_record(r: dict) -> AclBinding:
    return AclBinding.from_json(parse(ResourceType, r["resourceType"]), r["name"], parse(PatternType, r["patternType"]),
                                r)
