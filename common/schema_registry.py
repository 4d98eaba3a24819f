"""Where a schema registry is and how to reach it: the `schema_registry:` block the connector (Avro out) and the
Spark sink (Avro in) share, as confluent-kafka's SchemaRegistryClient settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class SchemaRegistrySettings(BaseModel):
    """Where the registry is: `url` (several, comma-separated, are tried in turn), HTTP Basic auth, the CA file
    that signed an https registry's certificate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://[^,\s]+(,\s*https?://[^,\s]+)*$")
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    ca_file: str | None = None

    @model_validator(mode="after")
    def _user_with_password(self) -> "SchemaRegistrySettings":
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError("basic_auth_user and basic_auth_password go together: set both, or neither")
        if self.ca_file is not None and "https://" not in self.url:
            raise ValueError(f"ca_file verifies an https registry, but url is {self.url}: use https:// or drop ca_file")
        return self

    def client_conf(self) -> dict:
        conf = {"url": self.url}
        if self.basic_auth_user is not None:
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{self.basic_auth_password.get_secret_value()}"
        if self.ca_file is not None:
            conf["ssl.ca.location"] = self.ca_file
        return conf
