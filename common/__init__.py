"""The shared base of binlake: what every part uses (client security settings, YAML loading,
Prometheus helpers, process lifetime). It imports no other binlake package; every package may import it."""
