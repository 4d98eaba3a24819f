"""connect — see docs/."""
