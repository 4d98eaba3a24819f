"""A broker with every security protocol, and the TLS files it needs, for the security tests and
the pipeline's runs against a secured broker (fixtures `certs` and `secure_broker` in conftest.py)."""

from __future__ import annotations

from sandbox.process import free_port, port_answers, wait_until_ready
from brokerproc import BrokerProcess

PLAIN_USERS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_admin="a\\"b";'


class SecureBroker:
    """A broker process with all four protocols: PLAINTEXT on `address` (where the test harness
    waits for it), SASL_PLAINTEXT, SSL and SASL_SSL on ports of their own."""

    def __init__(self, tmp_path, certs, **config: str) -> None:
        self.ports = {name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")}
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        self.process = BrokerProcess(tmp_path / "secure", port=self.ports["PLAINTEXT"], config={
            "listeners": listeners, "ssl.keystore.location": str(certs / "broker.pem"),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_USERS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_USERS, **config})

    def start(self) -> "SecureBroker":
        """Start the broker and wait for every listener, not only PLAINTEXT's: a loaded machine can take a
        moment between them."""
        self.process.start()
        wait_until_ready(self.process.proc, lambda: all(port_answers(port, 0.2) for port in self.ports.values()),
                         "broker", 90, self.process.log, interval_s=0.05)
        return self

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"
