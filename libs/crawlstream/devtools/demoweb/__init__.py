"""A deterministic synthetic web on loopback for the demo, the tests and the benchmarks."""

from crawlstream.devtools.demoweb._model import SITEMAP_PATHS, SPECIAL_PATHS, Page, WebModel
from crawlstream.devtools.demoweb._render import gzip_bomb, sitemap_bomb
from crawlstream.devtools.demoweb._server import DemoWeb, RequestRecord, pairs_apart

__all__ = [
    "SITEMAP_PATHS",
    "SPECIAL_PATHS",
    "DemoWeb",
    "Page",
    "RequestRecord",
    "WebModel",
    "gzip_bomb",
    "pairs_apart",
    "sitemap_bomb",
]
