"""replication — see docs/."""
