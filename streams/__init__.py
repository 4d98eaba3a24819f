"""streams — see docs/."""
