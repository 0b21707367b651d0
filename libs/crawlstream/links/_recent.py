"""A bounded memory of URLs a link extractor emitted recently (pure: no I/O, no clock)."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["RecentUrls"]


class RecentUrls:
    """The last ``capacity`` URLs added, least recently seen dropped first.

    Pages of one site link to the same URLs over and over (home, next page, nav): about 70%
    of the links the crawl loop extracts were emitted before. The deduper is the authority
    on what is new; this only spares it (and the bus) repeats it would drop anyway. A URL
    evicted or forgotten on restart is emitted again, which is harmless.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._urls: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, url: str) -> bool:
        if url in self._urls:
            self._urls.move_to_end(url)
            return True
        return False

    def add(self, url: str) -> None:
        if self._capacity == 0:
            return
        self._urls[url] = None
        self._urls.move_to_end(url)
        if len(self._urls) > self._capacity:
            self._urls.popitem(last=False)

    def __len__(self) -> int:
        return len(self._urls)
