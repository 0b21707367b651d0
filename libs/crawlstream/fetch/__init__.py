"""The fetch core: aiohttp with robots.txt, caps, bomb limits and the SSRF guard, and the outcome
of a fetch with its groups. ``crawlstream.fetch.service`` is the fetcher service built on it."""

from crawlstream.fetch._decode import ACCEPT_ENCODING
from crawlstream.fetch._fetcher import Fetcher, load_resolve_map, redirect_hop_record
from crawlstream.fetch._guard import GuardedResolver, is_public_address
from crawlstream.fetch._outcome import (
    ERROR_OUTCOMES,
    OUTCOMES,
    REVISITABLE_OUTCOMES,
    FetchOutcome,
    Outcome,
    parse_retry_after,
)

__all__ = [
    "ACCEPT_ENCODING",
    "ERROR_OUTCOMES",
    "OUTCOMES",
    "REVISITABLE_OUTCOMES",
    "FetchOutcome",
    "Fetcher",
    "GuardedResolver",
    "Outcome",
    "is_public_address",
    "load_resolve_map",
    "parse_retry_after",
    "redirect_hop_record",
]
