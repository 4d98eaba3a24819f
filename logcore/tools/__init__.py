"""tools — see docs/."""
