"""URL datasets shaped like the real lists of ../shared/data, at any size, seeded (``bench scale``).

Shape measured on the Reddit webtext list (207k URLs; ``python -m bench.scale_data --shape``
prints it beside the generator's): ~8 URLs per registered domain with Zipf popularity (domains
growing with the list's size by Heaps' law, see ``HEAPS_EXPONENT``) (top 10
domains hold 18% of the URLs, 59% of domains are seen once), 61% of hosts ``www.``, URLs of 70 characters on
average, 1-8 path segments (2-3 most often), a query on 22% of URLs (median 16 characters).
A URL's first path segment comes from a small per-domain set, so a domain's URLs share
prefixes as real sites' do; everything else is drawn from a vocabulary.

Vectorised: numpy draws the choices, pyarrow's element-wise joins assemble the strings, and
pyarrow's CSV writer writes the lines (~1 us per URL), so 100M URLs are minutes, not an hour.
A few rows need canonicalizing (upper-case hosts, default ports, fragments) or are rejected
(not URLs, blank lines), as in real lists.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import zstandard

# Candidate domains: with Zipf weights 1/rank over n/3 candidates a 207k-URL draw has 6.2 URLs
# per domain, 25% in the top 10 and 53% singletons (Reddit: 8.4, 18%, 59%; one exponent cannot
# match all three: a flatter one lowers the head share but loses the singletons). Larger lists
# grow their domains by Heaps' law, N^0.76: the exponent that joins Reddit's 24.6k domains in
# 207k URLs to Common Crawl's ~35M registered domains in ~3B pages (its published crawl stats),
# so 100M URLs draw ~3M domains rather than a fixed share's 33M.
HEAPS_BASE_URLS = 207_027
HEAPS_BASE_CANDIDATES = HEAPS_BASE_URLS // 3
HEAPS_EXPONENT = 0.76


def candidate_domains(n_urls: int) -> int:
    """Candidate domains for a list of ``n_urls`` URLs (see ``HEAPS_EXPONENT``)."""
    return max(1000, int(HEAPS_BASE_CANDIDATES * (n_urls / HEAPS_BASE_URLS) ** HEAPS_EXPONENT))


SEGMENT_COUNTS = np.array([0.157, 0.199, 0.216, 0.137, 0.172, 0.081, 0.027, 0.011])  # 1..8 segments
QUERY_SHARE = 0.22
WWW_SHARE = 0.61
_TLDS = ["com"] * 14 + ["org", "net", "de", "co.uk", "io", "fr", "jp", "com.au", "info", "ru", "nl", "edu",
                        "gov", "ca", "it", "es", "pl", "in", "com.br", "blogspot.com"]
_SUBS = ["blog", "news", "shop", "m", "en", "forum", "docs", "api", "mail", "community", "store", "wiki"]
_QUERY_KEYS = ["id", "p", "page", "q", "ref", "s", "cat", "lang", "sort", "v"]
_EXTS = ["", "", "", "", ".html", ".htm", ".php", ".aspx", ".pdf", ".jpg"]
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)


@dataclass(frozen=True)
class Generated:
    """The files of one generated size: per dataset id, its zstd text files (one URL per line)."""

    files: dict[int, list[Path]]
    rows: int  # lines written, including the ones ingest rejects
    domains: int  # candidate domains (not all are drawn)


def _words(rng: np.random.Generator, n: int, lo: int, hi: int) -> pa.Array:
    """``n`` pronounceable-ish lowercase words (random letters; lengths ``lo``..``hi``)."""
    lengths = rng.integers(lo, hi + 1, n)
    letters = _LETTERS[rng.integers(0, 26, int(lengths.sum()))]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(letters.tobytes()))


def _zipf_ranks(rng: np.random.Generator, n_domains: int, k: int) -> np.ndarray:
    """``k`` draws of domain ranks 0..n_domains-1 with weight 1/(rank+1), by inverse CDF."""
    cdf = np.cumsum(1.0 / np.arange(1, n_domains + 1))
    return np.searchsorted(cdf, rng.random(k) * cdf[-1]).clip(0, n_domains - 1)


def _join(parts: list[pa.Array | str], sep: str = "") -> pa.Array:
    return pc.binary_join_element_wise(*parts, sep, null_handling="skip")


def _masked(values: pa.Array, keep: np.ndarray) -> pa.Array:
    """``values`` with nulls where ``keep`` is False (a skipped part of a URL)."""
    return pc.if_else(pa.array(keep), values, pa.scalar(None, pa.string()))


class _Universe:
    """The domains, their hosts and sections, and the vocabulary, shared by every dataset."""

    def __init__(self, rng: np.random.Generator, n_domains: int) -> None:
        self.n = n_domains
        stems = _words(rng, n_domains, 4, 11)
        tlds = pa.array(_TLDS).take(pa.array(rng.integers(0, len(_TLDS), n_domains)))
        ids = pc.cast(pa.array(np.arange(n_domains)), pa.string())  # unique names at any size
        self.domains = _join([_join([stems, ids]), tlds], ".")
        self.vocab = _words(rng, 4000, 2, 10)
        self.sections = _words(rng, 512, 3, 9)

    def urls(self, rng: np.random.Generator, k: int) -> pa.Array:
        d = _zipf_ranks(rng, self.n, k)
        domain = self.domains.take(pa.array(d))
        r = rng.random(k)
        sub = pa.array(_SUBS).take(pa.array((d * 7 + rng.integers(0, 3, k)) % len(_SUBS)))
        www = pa.array(np.full(k, "www"))
        prefix = pc.if_else(pa.array(r < WWW_SHARE), www,
                            pc.if_else(pa.array(r < WWW_SHARE + 0.14), sub, pa.scalar(None, pa.string())))
        host = _join([prefix, domain], ".")
        scheme = pc.if_else(pa.array(rng.random(k) < 0.7), pa.scalar("https://"), pa.scalar("http://"))
        n_segs = rng.choice(np.arange(1, 9), size=k, p=SEGMENT_COUNTS / SEGMENT_COUNTS.sum())
        # the first segment: one of 4 sections of the domain; the others: words, slugs or numbers
        segs: list[pa.Array] = [self.sections.take(pa.array((d * 4 + rng.integers(0, 4, k)) % len(self.sections)))]
        for i in range(1, 8):
            kind = rng.random(k)
            word = self.vocab.take(pa.array(rng.integers(0, len(self.vocab), k)))
            slug = _join([word, self.vocab.take(pa.array(rng.integers(0, len(self.vocab), k))),
                          self.vocab.take(pa.array(rng.integers(0, len(self.vocab), k)))], "-")
            number = pc.cast(pa.array(rng.integers(0, 10 ** rng.integers(2, 8, k))), pa.string())
            seg = pc.if_else(pa.array(kind < 0.55), word, pc.if_else(pa.array(kind < 0.8), slug, number))
            segs.append(_masked(seg, n_segs > i))
        ext = pa.array(_EXTS).take(pa.array(rng.integers(0, len(_EXTS), k)))
        path = _join([_join(segs, "/"), ext])
        key1 = pa.array(_QUERY_KEYS).take(pa.array(rng.integers(0, len(_QUERY_KEYS), k)))
        key2 = pa.array(_QUERY_KEYS).take(pa.array(rng.integers(0, len(_QUERY_KEYS), k)))
        val1 = pc.cast(pa.array(rng.integers(0, 10 ** rng.integers(1, 7, k))), pa.string())
        val2 = self.vocab.take(pa.array(rng.integers(0, len(self.vocab), k)))
        q = rng.random(k)
        pair1 = _join([key1, val1], "=")
        pair2 = _masked(_join([key2, val2], "="), q < QUERY_SHARE * 0.4)
        query = _masked(_join([pair1, pair2], "&"), q < QUERY_SHARE)
        url = _join([_join([scheme, host]), path], "/")
        url = pc.if_else(pc.is_null(query), url, _join([url, query], "?"))
        return self._noise(rng, url, host)

    @staticmethod
    def _noise(rng: np.random.Generator, url: pa.Array, host: pa.Array) -> pa.Array:
        """What canonicalization fixes or rejects in real lists, on a few rows."""
        k = len(url)
        r = rng.random(k)
        upper = _join([pa.array(np.full(k, "http://")), pc.utf8_upper(host), pa.array(np.full(k, "/"))])
        url = pc.if_else(pa.array(r < 0.01), upper, url)  # HTTP://WWW.EXAMPLE.COM/
        url = pc.if_else(pa.array((r >= 0.01) & (r < 0.02)), _join([url, pa.array(np.full(k, "#top"))]), url)
        bad = pa.array(np.where(rng.random(k) < 0.5, "not a url", "mailto:someone@example.com"))
        url = pc.if_else(pa.array((r >= 0.02) & (r < 0.021)), bad, url)
        return pc.if_else(pa.array((r >= 0.021) & (r < 0.0215)), pa.scalar(""), url)


def generate(out: Path, n_urls: int, *, seed: int = 27, datasets: int = 4,
             file_rows: int = 1_000_000, min_files: int = 4, chunk: int = 500_000) -> Generated:
    """``n_urls`` lines over ``datasets`` datasets (popularity shared, as crawls of one web share
    it), each dataset's lines in at least ``min_files`` zstd text files of equal size, at most
    ``file_rows`` lines each (the splits Spark reads in parallel). Files already there from the
    same arguments are kept (generation is deterministic)."""
    out.mkdir(parents=True, exist_ok=True)
    n_domains = candidate_domains(n_urls)
    per = n_urls // datasets
    n_files = max(min_files, -(-per // file_rows))
    every = {ds: [out / f"ds{ds:02d}-{part:04d}.txt.zst" for part in range(n_files)] for ds in range(1, datasets + 1)}
    if all(path.exists() for paths in every.values() for path in paths):
        return Generated(every, per * datasets, n_domains)  # all kept: no need to draw the stream again
    rng = np.random.default_rng(seed)
    universe = _Universe(rng, n_domains)
    files: dict[int, list[Path]] = {}
    cctx = zstandard.ZstdCompressor(level=3, threads=2)
    for ds in range(1, datasets + 1):
        files[ds] = []
        for part in range(n_files):
            rows = per // n_files + (part < per % n_files)
            path = out / f"ds{ds:02d}-{part:04d}.txt.zst"
            files[ds].append(path)
            if path.exists():  # keep the random stream where a fresh run would be
                for done in range(0, rows, chunk):
                    universe.urls(rng, min(chunk, rows - done))
                continue
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as raw, cctx.stream_writer(raw) as zw:
                for done in range(0, rows, chunk):
                    table = pa.table({"url": universe.urls(rng, min(chunk, rows - done))})
                    pacsv.write_csv(table, zw, pacsv.WriteOptions(include_header=False, quoting_style="none"))
            tmp.rename(path)
    return Generated(files, per * datasets, n_domains)


def _shape(lines: list[str]) -> dict[str, float]:
    """The measures the generator is fitted to, for a list of raw URLs."""
    from collections import Counter
    from urllib.parse import urlsplit

    from crawlstream.errors import InvalidUrl
    from crawlstream.urls import canonicalize

    domains: Counter[str] = Counter()
    lengths, queries, www = [], 0, 0
    for line in lines:
        try:
            c = canonicalize(line)
        except InvalidUrl:
            continue
        domains[c.domain] += 1
        parts = urlsplit(c.url)
        lengths.append(len(c.url))
        queries += bool(parts.query)
        www += (parts.hostname or "").startswith("www.")
    n = len(lengths)
    top10 = sum(c for _, c in domains.most_common(10))
    return {"urls": n, "urls_per_domain": round(n / len(domains), 2), "top10_share": round(top10 / n, 3),
            "singleton_domains": round(sum(c == 1 for c in domains.values()) / len(domains), 3),
            "mean_url_chars": round(sum(lengths) / n, 1), "query_share": round(queries / n, 3),
            "www_share": round(www / n, 3)}


if __name__ == "__main__" and "--shape" in sys.argv:
    import gzip
    import json
    import tempfile

    from bench._harness import shared_data

    real: list[str] = []
    for p in sorted((shared_data() / "urls" / "reddit-webtext").glob("*.gz")):
        with gzip.open(p, "rt") as text:
            real += [json.loads(line)["u"] for line in text]
    with tempfile.TemporaryDirectory() as tmp:
        gen = generate(Path(tmp), len(real), datasets=1)
        made: list[str] = []
        for path in gen.files[1]:
            with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as zr:
                made += zr.read().decode().splitlines()
    print(json.dumps({"reddit": _shape(real), "generated": _shape(made)}, indent=2))
