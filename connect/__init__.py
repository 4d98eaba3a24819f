"""connect — the connector runtime: YAML configs, plugins, offsets in the log, transforms, REST.

See docs/connect.md."""
