"""Throwaway servers on this machine, each with its own data directory and a free loopback port,
living as long as their owner: MariaDB and Oracle MySQL with the binlog CDC reads (`sandbox.sql`),
PostgreSQL (`sandbox.postgres`), ZooKeeper (`sandbox.zookeeper`); `sandbox.process` holds what they
share (starting, waiting until ready, stopping).

Shipped with binlake because `binlake demo` runs its pipeline on them (the demo's one dependency on
throwaway servers); the tests and benchmarks use them too. Test-only harnesses (brokers in
processes, clusters, TLS files, the reference Apache Kafka, the fuzzer) are in `testkit/`, which is
not installed. Imports `common` only.

By hand: `python -m sandbox.sql DIR [--mysql]`, `python -m sandbox.postgres DIR`,
`python -m sandbox.zookeeper DIR` run one in the foreground until Ctrl-C.
"""
