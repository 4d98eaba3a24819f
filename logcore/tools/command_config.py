"""`--command-config FILE`: the Java client properties Kafka's tools take to reach a secured broker,
turned into librdkafka's settings for the tools here:

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-256
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="…";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/binlake/ca.pem

TLS files must be PEM (a keystore location names one file with the certificate and its key).
"""

from __future__ import annotations

from pathlib import Path

import click

from common.kafka_security import KafkaSecurity

from ..protocol.errors import InvalidConfig
from ..security import jaas

PEM_ONLY = ("ssl.truststore.type", "ssl.keystore.type")
READ = {"security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location",
        "ssl.keystore.location", "ssl.key.password", "ssl.endpoint.identification.algorithm", *PEM_ONLY}


def read_properties(path: str) -> dict[str, str]:
    """key=value (or key: value) lines; # and ! start comments; a trailing backslash continues a line."""
    properties: dict[str, str] = {}
    logical = ""
    for line in Path(path).read_text().splitlines():
        line = line.strip() if not logical else line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            logical += line[:-1]
            continue
        logical += line
        cut = min((i for i in (logical.find("="), logical.find(":")) if i >= 0), default=len(logical))
        properties[logical[:cut].strip()] = logical[cut + 1:].strip()
        logical = ""
    return properties


def librdkafka_settings(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    properties = read_properties(path)
    unknown = sorted(set(properties) - READ)
    if unknown:
        raise click.BadParameter(f"{path}: binlake's tools read {', '.join(sorted(READ))}; "
                                 f"not {', '.join(unknown)}", param_hint="--command-config")
    for key in PEM_ONLY:
        if properties.get(key, "PEM").upper() != "PEM":
            raise click.BadParameter(f"{path}: {key} must be PEM (binlake reads PEM files only)",
                                     param_hint="--command-config")
    settings = {"security.protocol": properties.get("security.protocol", "PLAINTEXT")}
    if "sasl.mechanism" in properties:
        settings["sasl.mechanism"] = properties["sasl.mechanism"]
    if "sasl.jaas.config" in properties:
        try:
            options = jaas.parse("sasl.jaas.config", properties["sasl.jaas.config"]).options
        except InvalidConfig as exc:
            raise click.BadParameter(f"{path}: {exc.message}", param_hint="--command-config") from None
        settings.update({"sasl.username": options.get("username", ""), "sasl.password": options.get("password", "")})
    optional = {"ssl.ca.location": properties.get("ssl.truststore.location"),
                "ssl.certificate.location": properties.get("ssl.keystore.location"),
                "ssl.key.location": properties.get("ssl.keystore.location"),
                "ssl.key.password": properties.get("ssl.key.password")}
    if properties.get("ssl.endpoint.identification.algorithm") == "":
        settings["ssl.endpoint.identification.algorithm"] = "none"
    return {**settings, **{key: value for key, value in optional.items() if value}}


def kafka_security(path: str | None) -> KafkaSecurity | None:
    """The same properties as the clients' security settings, for binlake's own wire connections
    (tools/wire_admin.py); None without a file."""
    if path is None:
        return None
    settings = librdkafka_settings(path)
    unsupported = sorted({"ssl.key.password", "ssl.endpoint.identification.algorithm"} & set(settings))
    if unsupported:
        raise click.BadParameter(f"{path}: this command connects with binlake's own client, which takes no "
                                 f"{' or '.join(unsupported)} (an unencrypted key; host names checked)",
                                 param_hint="--command-config")
    try:
        return KafkaSecurity(protocol=settings["security.protocol"], sasl_mechanism=settings.get("sasl.mechanism"),
                             username=settings.get("sasl.username"), password=settings.get("sasl.password"),
                             ca_file=settings.get("ssl.ca.location"), cert_file=settings.get("ssl.certificate.location"),
                             key_file=settings.get("ssl.key.location"))
    except ValueError as exc:  # (pydantic's ValidationError)
        raise click.BadParameter(f"{path}: {exc}", param_hint="--command-config") from None
