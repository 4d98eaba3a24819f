"""Test harnesses, not part of the installed product (the wheel leaves this package out): a real
broker in its own process (`brokerproc`), a ZooKeeper cluster of them (`clusterproc`), throwaway TLS
files (`tlssandbox`), Apache Kafka and Kafka Connect run from their jars (`reference`), and the
wire-protocol fuzzer (`fuzz`). tests/ and bench/ import it from the source tree; it may import any
package below `binlake` (the throwaway servers themselves are `sandbox`, which the demo uses too),
and starts binlake only as a command (`python -m binlake.cli`), never by importing it."""
