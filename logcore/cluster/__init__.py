"""cluster — see docs/."""
