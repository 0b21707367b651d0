"""What keeping each page's HTTP response head costs in the content store (ADR 022, WARC export).

Two page sets, each stored twice into fresh stores, once without and once with the head and
peer address (``ContentStore.put(response_head=, ip_address=)``): (a) the real responses of
``../shared/data/warc/iana.warc.gz`` (www.iana.org: HTML, CSS, JS, fonts, images, with the
heads the server sent), (b) the synthetic web's pages fetched by the real fetcher over
loopback. Reported per record: the head's raw size, and the bytes it adds on disk in the hot
tier (zstd level 3, no dictionary yet), after recompression into the cold tier (trained
dictionaries, grouped frames), and for hot puts once the domains have dictionaries (the same
pages again under new URLs); dictionaries and the index are counted in both stores.

Run: ``.venv/bin/python -m bench.bench_response_heads [--quick]``
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from bench._harness import main, shared_data
from crawlstream.devtools.demoweb import DemoWeb
from crawlstream.fetch import Fetcher
from crawlstream.settings import FetchSettings
from crawlstream.store import ContentStore, StoreConfig

Page = tuple[str, bytes, bytes, str]  # url, body, head, ip


def iana_pages() -> list[Page]:
    pages: list[Page] = []
    seen: set[str] = set()
    with open(shared_data() / "warc" / "iana.warc.gz", "rb") as fh:
        for record in ArchiveIterator(fh):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            if url in seen:
                continue
            seen.add(url)
            head = record.http_headers.to_str().encode("latin-1", "replace")
            ip = record.rec_headers.get_header("WARC-IP-Address") or "192.0.43.8"
            body = record.content_stream().read()
            if body:
                pages.append((url, body, head, ip))
    return pages


def demo_pages(limit: int = 400) -> list[Page]:
    async def fetch_all(web: DemoWeb, urls: list[str]) -> list[Page]:
        out: list[Page] = []
        async with Fetcher(
            config=FetchSettings(allow_private_networks=True, timeout_s=5.0),
            resolve_map=web.resolve_map,
            resolve_map_only=True,
        ) as fetcher:
            for url in urls:
                got = await fetcher.afetch(url)
                if got.outcome == "ok" and got.body:
                    out.append((url, got.body, got.response_head, got.ip_address))
        return out

    with DemoWeb(40, pages_per_domain=12, seed=2, special_every=0, crawl_delay_s=0.0) as web:
        urls = sorted(u for u in web.reachable_pages() if "/p/" in u or u.endswith("/"))[:limit]
        return asyncio.run(fetch_all(web, urls))


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def measure(pages: list[Page]) -> dict[str, float]:
    result: dict[str, float] = {"records": len(pages)}
    result["head_raw_bytes_per_record"] = round(sum(len(p[2]) for p in pages) / len(pages), 1)
    result["body_raw_bytes_per_record"] = round(sum(len(p[1]) for p in pages) / len(pages), 1)
    sizes: dict[tuple[bool, str], int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for with_head in (False, True):
            root = Path(tmp) / f"store-{with_head}"
            with ContentStore(root, config=StoreConfig(fsync="never", dict_min_samples=16)) as store:
                for i, (url, body, head, ip) in enumerate(pages):
                    store.put(
                        url,
                        body,
                        status=200,
                        fetched_at_ms=1_700_000_000_000 + i,
                        response_head=head if with_head else None,
                        ip_address=ip if with_head else None,
                    )
                store.sync()
                sizes[(with_head, "hot")] = store_bytes(root)
                store.recompress(0.0, tier="cold", now_ms=10**13)
                sizes[(with_head, "cold")] = store_bytes(root)
                # the same pages again (new URLs, bodies one byte longer: no dedupe), now that
                # their domains have dictionaries: what a hot put costs later in a crawl
                for i, (url, body, head, ip) in enumerate(pages):
                    store.put(
                        f"{url}{'&' if '?' in url else '?'}again=1",
                        body + b"\n",
                        status=200,
                        fetched_at_ms=1_800_000_000_000 + i,
                        response_head=head if with_head else None,
                        ip_address=ip if with_head else None,
                    )
                store.sync()
                sizes[(with_head, "hot_with_dicts")] = store_bytes(root) - sizes[(with_head, "cold")]
    for tier in ("hot", "cold", "hot_with_dicts"):
        added = sizes[(True, tier)] - sizes[(False, tier)]
        result[f"{tier}_store_bytes_without"] = sizes[(False, tier)]
        result[f"{tier}_added_bytes_per_record"] = round(added / len(pages), 1)
        result[f"{tier}_added_pct"] = round(100 * added / sizes[(False, tier)], 2)
    return result


def run(quick: bool) -> dict[str, dict[str, float]]:
    return {"iana_warc": measure(iana_pages()), "demo_web": measure(demo_pages(100 if quick else 400))}


if __name__ == "__main__":
    main(run)
