"""Link extraction: selectolax (Lexbor, the library's choice) vs lxml (baseline), same run.

Over the 957 real pages in shared/data/html (base URL from manifest.csv; pages without
one use a placeholder). Reports pages/s and MB/s (decompressed HTML) for the whole
``extract_links`` path (decode + parse + resolve + canonicalize) and for parsing alone,
and the agreement: pages whose canonical link lists are identical, and link-level Jaccard.
"""

from __future__ import annotations

import csv
import gzip
import time
from typing import Any

import lxml.etree

from bench._harness import main, shared_data
from crawlstream.links import decode_html, extract_links_with_stats, parse_refresh, resolve_candidates
from crawlstream.links._extract import Rel, _candidates

_LXML_TAGS = ("a", "area", "link", "base", "meta")


def lxml_candidates(text: str) -> tuple[str | None, list[tuple[str, Rel]]]:
    """The baseline: the same contract as the library's ``_candidates``, with lxml."""
    parser = lxml.etree.HTMLParser(encoding="utf-8", recover=True, no_network=True)
    root = lxml.etree.fromstring(text.encode("utf-8", "surrogatepass"), parser)
    base: str | None = None
    out: list[tuple[str, Rel]] = []
    if root is None:
        return base, out
    for node in root.iter(*_LXML_TAGS):
        tag = node.tag
        get = node.get
        if tag in ("a", "area"):
            href = get("href")
            if href is not None:
                out.append((href, tag))
        elif tag == "link":
            href = get("href")
            rels = (get("rel") or "").lower().split()
            if href is not None:
                if "canonical" in rels:
                    out.append((href, "canonical"))
                elif "alternate" in rels:
                    out.append((href, "alternate"))
        elif tag == "base":
            if base is None and get("href") is not None:
                base = get("href")
        elif tag == "meta" and (get("http-equiv") or "").strip().lower() == "refresh":
            url = parse_refresh(get("content") or "")
            if url is not None:
                out.append((url, "refresh"))
    return base, out


def lxml_extract(html: bytes, base_url: str) -> list[str]:
    base, cands = lxml_candidates(decode_html(html))
    return [link.url for link in resolve_candidates(base, cands, base_url).links]


def selectolax_extract(html: bytes, base_url: str) -> list[str]:
    return [link.url for link in extract_links_with_stats(html, base_url).links]


def load_pages() -> list[tuple[bytes, str]]:
    root = shared_data() / "html"
    pages = []
    with open(root / "manifest.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            html = gzip.decompress((root / row["file"]).read_bytes())
            pages.append((html, row["url"] or "http://unknown.invalid/"))
    return pages


def _best_of(fns: dict[str, Any], items: list[tuple[Any, str]], repeat: int) -> dict[str, float]:
    """Best wall time per function, rounds interleaved so machine noise hits both alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for item, url in items:
                fn(item, url)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def run(quick: bool) -> dict[str, Any]:
    pages = load_pages()
    if quick:
        pages = pages[::6]
    repeat = 3 if quick else 5
    total_mb = sum(len(h) for h, _ in pages) / 1e6
    texts = [(decode_html(h), u) for h, u in pages]

    results: dict[str, Any] = {"pages": len(pages), "html_mb": round(total_mb, 2), "repeat_best_of": repeat}
    extract = _best_of({"selectolax": selectolax_extract, "lxml": lxml_extract}, pages, repeat)
    parse = _best_of(
        {"selectolax": lambda text, _u: _candidates(text), "lxml": lambda text, _u: lxml_candidates(text)},
        texts,
        repeat,
    )
    for name in ("selectolax", "lxml"):
        results[name] = {
            "extract_pages_per_s": round(len(pages) / extract[name], 1),
            "extract_mb_per_s": round(total_mb / extract[name], 2),
            "parse_only_pages_per_s": round(len(pages) / parse[name], 1),
            "parse_only_mb_per_s": round(total_mb / parse[name], 2),
        }

    identical = 0
    inter = union = 0
    links_sx = links_lx = 0
    differing: list[str] = []
    for html, url in pages:
        a = selectolax_extract(html, url)
        b = lxml_extract(html, url)
        links_sx += len(a)
        links_lx += len(b)
        if a == b:
            identical += 1
        elif len(differing) < 5:
            differing.append(url)
        sa, sb = set(a), set(b)
        inter += len(sa & sb)
        union += len(sa | sb)
    results["agreement"] = {
        "identical_pages_pct": round(100 * identical / len(pages), 2),
        "link_jaccard_pct": round(100 * inter / max(union, 1), 3),
        "links_selectolax": links_sx,
        "links_lxml": links_lx,
        "example_differing_pages": differing,
    }
    results["speedup_selectolax_over_lxml"] = {
        "extract": round(extract["lxml"] / extract["selectolax"], 2),
        "parse_only": round(parse["lxml"] / parse["selectolax"], 2),
    }
    return results


if __name__ == "__main__":
    main(run)
