"""A schema registry serving Confluent Schema Registry's REST API, its state in the compacted `_schemas` topic."""
