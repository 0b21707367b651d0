"""robots.txt: RFC 9309 policy around protego, cached per origin (fetching is in ``crawlstream.fetch``)."""

from crawlstream.robots._imported import IMPORTED_ROBOTS_PREFIX, ImportedRobots, ImportedRobotsTxt
from crawlstream.robots._robots import (
    MAX_CRAWL_DELAY_S,
    MAX_ROBOTS_BYTES,
    MAX_ROBOTS_REDIRECTS,
    RobotsCache,
    RobotsDecision,
    RobotsPolicy,
    origin_of,
    product_token,
    robots_url_for,
)

__all__ = [
    "IMPORTED_ROBOTS_PREFIX",
    "MAX_CRAWL_DELAY_S",
    "MAX_ROBOTS_BYTES",
    "MAX_ROBOTS_REDIRECTS",
    "ImportedRobots",
    "ImportedRobotsTxt",
    "RobotsCache",
    "RobotsDecision",
    "RobotsPolicy",
    "origin_of",
    "product_token",
    "robots_url_for",
]
