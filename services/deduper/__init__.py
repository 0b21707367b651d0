"""The deduper service: urls.discovered -> urls.frontier, never-seen URLs only."""
