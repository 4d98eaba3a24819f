"""Run confluent-kafka-python's own schema-registry integration tests against `binlake schema-registry`.

    python -m testkit.confluent_sr_suite SUITE_DIR [PYTEST_ARGS...]

SUITE_DIR holds the `tests/` directory of a confluent-kafka-python checkout (`git archive HEAD tests |
tar -x -C SUITE_DIR`) and, in SUITE_DIR/deps, what its conftest imports although bring-your-own mode
never uses it (`pip install --no-deps --target SUITE_DIR/deps trivup==0.12.2 jwcrypto python_jwt
"setuptools<81"`). This starts a logcore broker and a registry on free ports, runs
tests/integration/schema_registry (sync and async) in the suite's bring-your-own mode (BROKERS,
SR_URL), prints pytest's summary and exits with its status. docs/compatibility.md has the figures.

Two adjustments, both to the harness and none to a test: `ByoFixture` (2.15.0) has no
`async_schema_registry`, so every async test would fail on the fixture; a plugin gives it one that
returns `AsyncSchemaRegistryClient` for SR_URL, as `TrivupFixture`'s does. And the tests that ask for
a Confluent Platform 7.0.1 cluster of their own (`kafka_cluster_cp_7_0_1`, trivup downloads it) are
deselected: they never use SR_URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .brokerproc import BrokerProcess
from .registryproc import RegistryProcess

SHIM = '''
from confluent_kafka.schema_registry._async.schema_registry_client import AsyncSchemaRegistryClient
from tests.integration.cluster_fixture import ByoFixture


def _async_schema_registry(self, conf=None):
    return AsyncSchemaRegistryClient({"url": self._sr_url})


ByoFixture.async_schema_registry = _async_schema_registry
'''


def main(suite: Path, pytest_args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="confluent-sr-suite-") as tmp:
        work = Path(tmp)
        (work / "byo_async.py").write_text(SHIM)
        broker = BrokerProcess(work / "broker", config={"group.initial.rebalance.delay.ms": "0"}).start()
        registry = None
        try:
            registry = RegistryProcess(broker.address, work / "registry.log").start()
            env = {**os.environ, "BROKERS": broker.address, "SR_URL": registry.url,
                   "PYTHONPATH": os.pathsep.join(map(str, (suite, suite / "deps", work)))}
            return subprocess.run(
                [sys.executable, "-m", "pytest", "tests/integration/schema_registry", "-p", "byo_async",
                 "-p", "no:cacheprovider", "-o", "asyncio_mode=auto", "--timeout", "120", "-k", "not cp_7_0_1",
                 "-q", "-rfE", *pytest_args], cwd=suite, env=env).returncode
        finally:
            if registry is not None:
                registry.kill()
            broker.kill()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]).resolve(), sys.argv[2:]))
