"""coordinator — see docs/."""
