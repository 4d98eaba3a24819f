"""Confluent Schema Registry's errors: an HTTP status, an `error_code` and a message, as its clients expect.

Every refusal the REST API sends is one of these; the body is `{"error_code": N, "message": ...}`.
"""

from __future__ import annotations

MAX_VERSION = 2**31 - 1


class RegistryError(Exception):
    status = 500
    code = 50001

    def body(self) -> dict:
        return {"error_code": self.code, "message": str(self)}


class SubjectNotFound(RegistryError):
    status, code = 404, 40401

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")


class VersionNotFound(RegistryError):
    status, code = 404, 40402

    def __init__(self, subject: str, version: int | str) -> None:
        super().__init__(f"Version {version} not found for subject '{subject}'.")


class SchemaNotFound(RegistryError):
    status, code = 404, 40403

    def __init__(self, detail: str = "Schema not found") -> None:
        super().__init__(detail)


class SubjectSoftDeleted(RegistryError):
    status, code = 404, 40404

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


class SubjectNotSoftDeleted(RegistryError):
    status, code = 404, 40405

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' was not deleted first before being permanently deleted")


class VersionSoftDeleted(RegistryError):
    status, code = 404, 40406

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete "
                         "permanently")


class VersionNotSoftDeleted(RegistryError):
    status, code = 404, 40407

    def __init__(self, subject: str, version: int) -> None:
        super().__init__(f"Subject '{subject}' Version {version} was not deleted first before being permanently "
                         "deleted")


class SubjectConfigNotFound(RegistryError):
    status, code = 404, 40408

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' does not have subject-level compatibility configured")


class SubjectModeNotFound(RegistryError):
    status, code = 404, 40409

    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' does not have subject-level mode configured")


class Incompatible(RegistryError):
    status, code = 409, 409

    def __init__(self, subject: str, reasons: list[str]) -> None:
        super().__init__(f"Schema being registered is incompatible with an earlier schema for subject "
                         f"\"{subject}\", details: [{', '.join(reasons)}]")


class InvalidSchema(RegistryError):
    status, code = 422, 42201


class InvalidVersion(RegistryError):
    status, code = 422, 42202

    def __init__(self, raw: str) -> None:
        super().__init__(f"The specified version '{raw}' is not a valid version id. Allowed values are between "
                         f"[1, {MAX_VERSION}] and the string \"latest\"")


class InvalidCompatibilityLevel(RegistryError):
    status, code = 422, 42203

    def __init__(self, raw: object) -> None:
        super().__init__(f"Invalid compatibility level {raw!r}. Valid values are none, backward, forward, full, "
                         "backward_transitive, forward_transitive, and full_transitive")


class InvalidMode(RegistryError):
    status, code = 422, 42204

    def __init__(self, raw: object) -> None:
        super().__init__(f"Invalid mode {raw!r}. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, IMPORT")


class OperationNotPermitted(RegistryError):
    status, code = 422, 42205


class ReferenceExists(RegistryError):
    status, code = 422, 42206


class SubjectExists(RegistryError):
    """A create that must not meet an existing subject (Apicurio's `ifExists=FAIL`: registry/apicurio.py)."""
    status, code = 409, 409

    def __init__(self, subject: str) -> None:
        super().__init__(f"An artifact with ID '{subject}' in group 'default' already exists.")


class BadRequest(RegistryError):
    """A request body or parameter the API cannot read (Confluent answers 400 / 42200-ish; its clients
    only show the message)."""
    status, code = 400, 400


class StoreError(RegistryError):
    status, code = 500, 50001


class StoreTimeout(RegistryError):
    status, code = 500, 50002


class ForwardingFailed(RegistryError):
    status, code = 500, 50003


class UnknownLeader(RegistryError):
    status, code = 500, 50004
