"""connect — the connector runtime: YAML configs, plugins, offsets kept in the log, transforms, REST (docs/connect.md)."""
