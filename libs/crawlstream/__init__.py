"""crawlstream."""
