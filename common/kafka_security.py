"""How binlake's own Kafka clients (the connector runtime, the Spark sink, stream workers) reach a
secured broker: one `security:` block in their YAML, rendered for each client library.

    security:
      protocol: SASL_SSL                 # PLAINTEXT (default) | SSL | SASL_PLAINTEXT | SASL_SSL
      sasl_mechanism: SCRAM-SHA-256      # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
      username: connect
      password: ${CONNECT_PASSWORD}
      ca_file: /etc/binlake/ca.pem       # PEM CAs that sign the brokers' certificates (default: the system's)
      cert_file: /etc/binlake/client.pem # client certificate and key (PEM), for ssl.client.auth
      key_file: /etc/binlake/client.key
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class KafkaSecurity(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password: SecretStr | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaSecurity":
        if self.sasl and not (self.sasl_mechanism and self.username and self.password):
            raise ValueError(f"protocol {self.protocol} needs sasl_mechanism, username and password")
        if not self.sasl and (self.sasl_mechanism or self.username or self.password):
            raise ValueError(f"sasl_mechanism, username and password need protocol SASL_PLAINTEXT or SASL_SSL, "
                             f"not {self.protocol}")
        if not self.tls and (self.ca_file or self.cert_file or self.key_file):
            raise ValueError(f"ca_file, cert_file and key_file need protocol SSL or SASL_SSL, not {self.protocol}")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("give cert_file and key_file together (a client certificate and its key)")
        return self

    def as_yaml(self) -> dict:
        """The block as it is written (the password in clear: for another config, never for display)."""
        return {**self.model_dump(exclude={"password"}, exclude_none=True),
                **({"password": self.password.get_secret_value()} if self.password else {})}

    def aiokafka(self) -> dict:
        """Keyword arguments of aiokafka's clients."""
        settings: dict = {"security_protocol": self.protocol}
        if self.tls:
            from aiokafka.helpers import create_ssl_context
            settings["ssl_context"] = create_ssl_context(cafile=self.ca_file, certfile=self.cert_file,
                                                         keyfile=self.key_file)
        if self.sasl:
            settings.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.username,
                            sasl_plain_password=self.password.get_secret_value())
        return settings

    def faust(self):
        """faust's `broker_credentials` (None for PLAINTEXT)."""
        import faust
        context = self.aiokafka().get("ssl_context")
        if self.sasl:
            return faust.SASLCredentials(username=self.username, password=self.password.get_secret_value(),
                                         mechanism=self.sasl_mechanism, ssl_context=context)
        return faust.SSLCredentials(context) if self.tls else None

    def confluent(self) -> dict:
        """librdkafka's settings."""
        settings = {"security.protocol": self.protocol}
        optional = {"ssl.ca.location": self.ca_file, "ssl.certificate.location": self.cert_file,
                    "ssl.key.location": self.key_file}
        settings.update({key: value for key, value in optional.items() if value})
        if self.sasl:
            settings.update({"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                             "sasl.password": self.password.get_secret_value()})
        return settings

    def java(self) -> dict:
        """The Java client's settings (Spark's Kafka source takes them prefixed with `kafka.`); PEM
        files are passed inline as PEM stores (KIP-651), so executors on other hosts need no copy of them."""
        settings = {"security.protocol": self.protocol}
        if self.ca_file:
            settings.update({"ssl.truststore.type": "PEM",
                             "ssl.truststore.certificates": Path(self.ca_file).read_text()})
        if self.cert_file:
            settings.update({"ssl.keystore.type": "PEM",
                             "ssl.keystore.certificate.chain": Path(self.cert_file).read_text(),
                             "ssl.keystore.key": Path(self.key_file).read_text()})
        if self.sasl:
            settings.update({"sasl.mechanism": self.sasl_mechanism, "sasl.jaas.config": (
                f"{LOGIN_MODULES[self.sasl_mechanism]} required username={json.dumps(self.username)} "
                f"password={json.dumps(self.password.get_secret_value())};")})
        return settings
