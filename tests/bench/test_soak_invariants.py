"""The soak's classification of unstored pages (issue 28): queued for a retry, or lost."""

from __future__ import annotations

from bench.soak.invariants import retry_pending


def test_a_retried_failure_with_an_attempt_left_is_pending_and_the_last_attempt_is_lost() -> None:
    last = {
        "http://a/1": ("timeout", "timed out", 0),  # retried at attempt 1: queued
        "http://a/2": ("connect_error", "refused", 1),  # retried at attempt 2: queued
        "http://a/3": ("timeout", "timed out", 2),  # the last of max_retries 2: given up
        "http://a/4": ("ok", None, 0),  # fetched but not stored: lost
        "http://a/5": ("robots_disallowed", None, 0),  # not retried
    }
    pending = retry_pending(last, max_retries=2)
    assert sorted(pending) == ["http://a/1", "http://a/2"]
    assert pending["http://a/1"] == "timeout (timed out), attempt 0"
