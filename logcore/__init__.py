"""logcore — a Kafka-protocol-compatible log broker. See docs/broker.md."""
