"""A deterministic synthetic web on loopback for the demo, the tests and the benchmarks."""

from crawlstream.demoweb._model import SPECIAL_PATHS, Page, WebModel
from crawlstream.demoweb._render import gzip_bomb
from crawlstream.demoweb._server import DemoWeb, RequestRecord

__all__ = ["SPECIAL_PATHS", "DemoWeb", "Page", "RequestRecord", "WebModel", "gzip_bomb"]
