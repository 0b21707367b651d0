"""The embedded crawl's orchestration (``crawlstream run``): services on threads, progress,
drain detection, crawl stats and the summary. Each service's wiring is its package's
``service`` module (``crawlstream.roles``); the CLI hands it in as ``ServiceSpec`` builders."""

from crawlstream.crawl._drain import BusLag, DrainDetector, LagProbe, is_idle
from crawlstream.crawl._progress import Progress, ProgressReporter, RateMeter, format_progress
from crawlstream.crawl._runner import CrawlRunner, Drainable, ServiceSpec
from crawlstream.crawl._seed_encoder import SeedEncoder
from crawlstream.crawl._seed_inputs import SeedSource, open_seed_sources
from crawlstream.crawl._seed_intake import SeedIntake
from crawlstream.crawl._seed_report import SeedProgress, SeedReport
from crawlstream.crawl._seeds import read_seeds, seed_events, send_seeds
from crawlstream.crawl._stats import ERROR_OUTCOMES, STATS_GROUP, CrawlStats, StatsHandler, load_stats, save_stats
from crawlstream.crawl._summary import CrawlSummary, summarize

__all__ = [
    "ERROR_OUTCOMES",
    "STATS_GROUP",
    "BusLag",
    "CrawlRunner",
    "CrawlStats",
    "CrawlSummary",
    "DrainDetector",
    "Drainable",
    "LagProbe",
    "Progress",
    "ProgressReporter",
    "RateMeter",
    "SeedEncoder",
    "SeedIntake",
    "SeedProgress",
    "SeedReport",
    "SeedSource",
    "ServiceSpec",
    "StatsHandler",
    "format_progress",
    "is_idle",
    "load_stats",
    "open_seed_sources",
    "read_seeds",
    "save_stats",
    "seed_events",
    "send_seeds",
    "summarize",
]
