"""Rebuilding what users query (the lake, the URL index) by replaying the retained topics."""

from crawlstream.replay._plan import STATE_FILE, ReplayProgress, ReplayState, check_retained, prepare_target

__all__ = ["STATE_FILE", "ReplayProgress", "ReplayState", "check_retained", "prepare_target"]
