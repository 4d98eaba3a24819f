"""Kafka's ACL authorizer: may this principal, from this host, do this operation on this resource?

The rules are Kafka's AclAuthorizer's: super users may do anything; the bindings that apply to a
resource are the literal ones of its name or `*` and the prefixed ones its name starts with; a
matching DENY wins over any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and of
ALTER_CONFIGS, DESCRIBE_CONFIGS; a resource no binding applies to is allowed only with
`allow.everyone.if.no.acl.found`. It is set with `authorizer.class.name`, as in Kafka; unset, every
request is allowed.
"""

from __future__ import annotations

from .acl_store import AclStore
from .acls import WILDCARD, IMPLIED_BY, AclBinding, Operation, PatternType, Permission, ResourceType

WILDCARD_USER = "User:*"


class Authorizer:
    def __init__(self, store: AclStore, super_users: set[str], allow_if_no_acl: bool) -> None:
        self.store, self.super_users, self.allow_if_no_acl = store, super_users, allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        store.changed = self._index
        self._index()

    @classmethod
    def from_config(cls, config, store_factory) -> "Authorizer | None":
        if not config.get("authorizer.class.name"):  # (the config accepts Kafka's own authorizers' names)
            return None
        super_users = {user.strip() for user in (config.get("super.users") or "").split(";") if user.strip()}
        return cls(store_factory(), super_users, config.get("allow.everyone.if.no.acl.found"))

    def _index(self) -> None:
        """Group the store's bindings by what they apply to (called again after every change)."""
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for b in self.store.bindings:
            if b.pattern_type == PatternType.LITERAL:
                literal.setdefault((b.resource_type, b.resource_name), []).append(b)
            else:
                prefixed.setdefault(b.resource_type, []).append(b)
        self._literal, self._prefixed = literal, prefixed  # (each swapped whole: readers never see half)

    def applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings that apply to one resource, whoever asks."""
        literal = self._literal
        return [*literal.get((resource_type, name), ()), *literal.get((resource_type, WILDCARD), ()),
                *(b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name))]

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        return self._decide(self.applying(resource_type, name), principal, host, operation)

    def authorize_some(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """May the principal do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, simplified: an ALLOW that a DENY on every resource `*` does not undo)?"""
        if principal in self.super_users:
            return True
        of_type = [*(b for (t, _), bs in self._literal.items() if t == resource_type for b in bs),
                   *self._prefixed.get(resource_type, ())]
        return self._decide(of_type, principal, host, operation,
                            denies=lambda b: b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD)

    def _decide(self, bindings: list[AclBinding], principal: str, host: str, operation: Operation,
                denies=lambda _binding: True) -> bool:
        """None: `allow.everyone.if.no.acl.found`. Else the principal's (or User:*'s) bindings from its
        host (or *): a DENY of the operation or ALL (of those `denies` counts) refuses, then an ALLOW
        of it, of ALL or of an operation that implies it grants."""
        if not bindings:
            return self.allow_if_no_acl
        mine = [b for b in bindings if b.principal in (principal, WILDCARD_USER) and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and b.operation in (operation, Operation.ALL) and denies(b)
               for b in mine):
            return False
        granting = {operation, Operation.ALL, *IMPLIED_BY.get(operation, ())}
        return any(b.permission == Permission.ALLOW and b.operation in granting for b in mine)
