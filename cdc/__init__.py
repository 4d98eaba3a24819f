"""cdc — see docs/."""
