"""Kafka's ACL model: a binding allows or denies one principal, from one host, one operation on the
resources one pattern names; a filter selects bindings (DescribeAcls, DeleteAcls, `binlake acls`).
The numeric codes are the protocol's."""

from __future__ import annotations

import enum
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"  # the cluster's only resource name
WILDCARD = "*"                  # a literal resource name, host or principal name that matches all


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2      # (filters only) every binding whose pattern matches the filter's name
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these grants the key too, as in Kafka (reading a topic implies describing it).
IMPLIED_BY = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}


def title(member: enum.Enum) -> str:
    """Kafka's spelling of an enum member: TRANSACTIONAL_ID → TransactionalId."""
    return "".join(word.capitalize() for word in member.name.split("_"))


def parse(enum_type: type[enum.IntEnum], text: str) -> enum.IntEnum:
    """An enum member from Kafka's spelling (`TransactionalId`, `transactional-id`, `TRANSACTIONAL_ID`)."""
    wanted = text.replace("-", "").replace("_", "").lower()
    for member in enum_type:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ValueError(f"{text!r} is not a {enum_type.__name__}: use one of "
                     f"{', '.join(title(m) for m in enum_type if m.name not in ('UNKNOWN', 'ANY', 'MATCH'))}")


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def problem(self) -> str | None:
        """Why this binding cannot be stored (Kafka's INVALID_REQUEST cases), or None."""
        concrete = (self.resource_type not in (ResourceType.UNKNOWN, ResourceType.ANY)
                    and self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
                    and self.operation not in (Operation.UNKNOWN, Operation.ANY)
                    and self.permission in (Permission.ALLOW, Permission.DENY))
        if not concrete:
            return "an ACL needs a concrete resource type, LITERAL or PREFIXED pattern, operation and permission"
        if not self.resource_name:
            return "the resource name is empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME!r}, not {self.resource_name!r}"
        kind, _, name = self.principal.partition(":")
        if not kind or not name:
            return f"principal {self.principal!r} is not TYPE:NAME (User:alice)"
        if not self.host:
            return "the host is empty (write * for any host)"
        return None

    def to_json(self) -> dict:
        """One entry of a resource's ACL list, as Kafka's ZooKeeper nodes hold it."""
        return {"principal": self.principal, "permissionType": title(self.permission),
                "operation": title(self.operation), "host": self.host}

    @classmethod
    def from_json(cls, resource_type: ResourceType, name: str, pattern: PatternType, entry: dict) -> "AclBinding":
        return cls(resource_type, name, pattern, entry["principal"], entry["host"],
                   parse(Operation, entry["operation"]), parse(Permission, entry["permissionType"]))

    def describe(self) -> str:
        return (f"{title(self.permission)} {self.principal} from {self.host} to {title(self.operation)} "
                f"{title(self.resource_type)} {self.resource_name} ({title(self.pattern_type)})")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """None or ANY: any value. PatternType.MATCH selects the bindings that would apply to the named
    resource: literal ones of that name or `*`, prefixed ones whose prefix it starts with."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def problem(self) -> str | None:
        unknown = [name for name, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                                             ("operation", self.operation), ("permission", self.permission))
                   if value == 0]
        return f"the filter's {', '.join(unknown)} is UNKNOWN" if unknown else None

    def matches(self, binding: AclBinding) -> bool:
        return (self.resource_type in (ResourceType.ANY, binding.resource_type)
                and self._matches_pattern(binding)
                and self.principal in (None, binding.principal)
                and self.host in (None, binding.host)
                and self.operation in (Operation.ANY, binding.operation)
                and self.permission in (Permission.ANY, binding.permission))

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            name = self.resource_name
            if name is None:
                return True
            if binding.pattern_type == PatternType.LITERAL:
                return binding.resource_name in (name, WILDCARD)
            return name.startswith(binding.resource_name)
        return (self.pattern_type in (PatternType.ANY, binding.pattern_type)
                and self.resource_name in (None, binding.resource_name))
