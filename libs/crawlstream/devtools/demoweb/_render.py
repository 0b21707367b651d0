"""Bytes of the synthetic web's responses (pure). Links are written in many equivalent
forms (absolute, root-relative, relative, protocol-relative, with fragments, under a
``<base href>``, in ``<area>`` and ``<link rel=alternate>``) so the link extractor has to
resolve and canonicalize them back to the model's URLs."""

from __future__ import annotations

import functools
import gzip
import random
import zlib
from xml.sax.saxutils import escape

from crawlstream.devtools.demoweb._model import Page

__all__ = ["PDF_BYTES", "PNG_BYTES", "gzip_bomb", "render_html", "render_huge", "render_sitemap", "sitemap_bomb"]

_SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"

PNG_BYTES = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
PDF_BYTES = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


def _href(link: str, host: str, path: str, rng: random.Random, *, under_base: bool) -> str:
    scheme_host = f"http://{host}"
    if not link.startswith(scheme_host + "/"):
        return link if rng.random() < 0.7 else link[len("http:") :]  # other host: absolute or //
    local = link[len(scheme_host) :]
    if under_base:  # <base href="http://host/">: relative to the root, not to the page
        return local[1:] or "./"
    form = rng.randrange(6)
    if form == 0:
        return link
    if form == 1:
        return local
    if form == 2:
        return "//" + host + local
    if form == 3:
        return f"HTTP://{host.upper()}{local}#section-{rng.randrange(9)}"
    if form == 4 and path.startswith("/p/") and local.startswith("/p/"):
        return local[3:]  # sibling: "/p/3" from "/p/7" is "3"
    if form == 4 and path == "/" and local != "/":
        return local[1:]
    return local + "#frag"


_VOCABULARY = (
    "the of and to in is was for on that with as by at from his an were are which this be has had "
    "not have one their its new after but who they been more two first also other all she can year "
    "city time during about some over only into most these many between state world national "
    "university county school number while under known later part high government river history "
    "music family film season album game team league station company series including population "
    "since early three north south west east public group system use found second several where "
    "river bridge market street garden library museum village harbour valley council railway"
)
_WORDS = tuple(_VOCABULARY.split())


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[str, ...]:
    """256 words (English ones, then made-up ones): a padded page's text is random words, so
    pages share words and markup, as real pages do, but not whole passages."""
    words = list(dict.fromkeys(_VOCABULARY.split()))
    rng = random.Random("vocabulary")
    while len(words) < 256:
        word = "".join(rng.choice("bcdfghjklmnprstvwz") + rng.choice("aeiou") for _ in range(rng.randrange(1, 5)))
        if word not in words:
            words.append(word)
    return tuple(words)


def _padding(rng: random.Random, size_range: tuple[int, int], have: int) -> str:
    """Paragraphs of random words until the page reaches a size drawn from ``size_range``
    (``randbytes`` picks the words: ~0.3 ms for 40 KB, cheap enough for the benchmark's server)."""
    target = max(0, rng.randint(*size_range) - have)
    text = " ".join(map(_vocabulary().__getitem__, rng.randbytes(target // 7 + 1)))[:target]
    return "\n".join(f"<p>{text[i : i + 900]}</p>" for i in range(0, len(text), 900))


def render_html(
    page: Page, host: str, path: str, seed: int, size_range: tuple[int, int] | None = None
) -> tuple[bytes, str]:
    """(body, content-type) of an HTML page; padded with text to a size in ``size_range``
    when given (the benchmark web's 15-60 KB pages), else about 1 KB."""
    rng = random.Random(f"render:{seed}:{host}:{path}")
    k = int(path[3:]) if path.startswith("/p/") and path[3:].isdigit() else -1
    under_base = k >= 0 and k % 5 == 4
    latin = k >= 0 and k % 7 == 3
    head = [f"<title>{host}{path}</title>"]
    head.append('<meta charset="windows-1252">' if latin else '<meta charset="utf-8">')
    if under_base:
        head.append(f'<base href="http://{host}/">')
    if page.kind == "refresh":
        head.append(f'<meta http-equiv="refresh" content="0; url={page.links[0][len("http://" + host) :]}">')
    for name, content in page.meta_robots:
        head.append(f'<meta name="{name}" content="{content}">')
    body = [
        f"<h1>Page {path} of {host}</h1>",
        "<p>Caf\u00e9 cr\u00e8me \u2014 synthetic text.</p>" if not latin else "<p>Caf\u00e9 cr\u00e8me</p>",
    ]
    body.append('<a href="mailto:webmaster@example.invalid">mail</a> <a href="javascript:void(0)">js</a>')
    body.append('<a href="#top">top</a> <a href="ftp://files.example.invalid/x">ftp</a> <a href="tel:+1555">tel</a>')
    links = page.links if page.kind != "refresh" else ()
    areas: list[str] = []
    # rel=nofollow first: a later followed link to the same URL must still count.
    for j, link in enumerate(page.nofollow_links):
        href = _href(link, host, path, rng, under_base=under_base)
        rel = ("nofollow", "external NoFollow", "ugc nofollow")[j % 3]
        if j % 2:
            areas.append(f'<area shape="rect" coords="0,0,1,1" rel="{rel}" href="{href}">')
        else:
            body.append(f'<p><a rel="{rel}" href="{href}">sponsored</a></p>')
    for link in page.blocked_links:  # plain links: the page-level nofollow is what hides them
        body.append(f'<p><a href="{_href(link, host, path, rng, under_base=under_base)}">more</a></p>')
    for link in links:
        href = _href(link, host, path, rng, under_base=under_base)
        roll = rng.random()
        if roll < 0.1:
            areas.append(f'<area shape="rect" coords="0,0,1,1" href="{href}">')
        elif roll < 0.15:
            head.append(f'<link rel="alternate" hreflang="fr" href="{href}">')
        else:
            body.append(f'<p><a class="l" href="{href}">link {rng.randrange(1000)}</a></p>')
    if areas:
        body.append('<map name="m">' + "".join(areas) + "</map>")
    body.append('<img src="/image-not-a-link.png" alt=""><script src="/app.js"></script>')
    if size_range is not None:  # text between the links, as in articles
        have = sum(map(len, head)) + sum(map(len, body))
        body.insert(2, _padding(rng, size_range, have))
    html = (
        "<!DOCTYPE html>\n<html><head>" + "".join(head) + "</head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    if latin:
        return html.encode("cp1252", errors="replace"), "text/html"  # charset only in <meta>
    return html.encode("utf-8"), "text/html; charset=utf-8"


def render_huge(host: str, size_bytes: int) -> bytes:
    head = f'<!DOCTYPE html><html><head><title>huge</title></head><body><a href="http://{host}/p/0">start</a>\n'
    filler = "<p>" + "lorem ipsum dolor sit amet " * 20 + "</p>\n"
    reps = max(1, (size_bytes - len(head)) // len(filler) + 1)
    return (head + filler * reps + "</body></html>\n").encode()


@functools.lru_cache(maxsize=4)
def gzip_bomb(decoded_bytes: int) -> bytes:
    """A gzip stream inflating to ``decoded_bytes`` zero bytes (about 1000:1)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1024 * 1024)
    out = bytearray()
    for _ in range(decoded_bytes // len(block)):
        out += comp.compress(block)
    out += comp.compress(bytes(decoded_bytes % len(block)))
    out += comp.flush()
    return bytes(out)


def _lastmod(rng: random.Random) -> str:
    month, day = rng.randrange(1, 13), rng.randrange(1, 29)
    if rng.random() < 0.5:
        return f"2026-{month:02d}-{day:02d}"
    return f"2026-{month:02d}-{day:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00+01:00"


def render_sitemap(page: Page, host: str, path: str, seed: int, bomb_bytes: int) -> tuple[bytes, str]:
    """(body, content-type) of a sitemap page: a urlset or index, or one of the bad ones."""
    rng = random.Random(f"sitemap:{seed}:{host}:{path}")
    if page.sitemap == "bomb":
        return sitemap_bomb(bomb_bytes, page.blocked_links[0]), "application/gzip"
    tag, entry = ("sitemapindex", "sitemap") if page.sitemap == "index" else ("urlset", "url")
    urls = page.links or page.blocked_links
    entries = "".join(
        f"<{entry}><loc>{escape(url)}</loc><lastmod>{_lastmod(rng)}</lastmod></{entry}>\n" for url in urls
    )
    doc = f'<?xml version="1.0" encoding="UTF-8"?>\n<{tag} xmlns="{_SITEMAP_NS}">\n{entries}</{tag}>\n'
    if page.sitemap == "broken":
        doc = doc[: -len(f"</{tag}>\n")] + f"<{entry}><loc>http://{host}/p/0</loc>\n"  # never closed
    elif page.sitemap == "dtd":
        laughs = "".join(f'<!ENTITY lol{k} "{f"&lol{k - 1};" * 10}">' for k in range(1, 10))
        dtd = f'<!DOCTYPE {tag} [<!ENTITY lol0 "lol">{laughs}<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
        doc = doc.replace("?>\n", "?>\n" + dtd, 1).replace(entries, entries + "<url><loc>&lol9;&xxe;</loc></url>")
    data = doc.encode()
    if page.gzip:
        return gzip.compress(data, mtime=0), "application/x-gzip"
    return data, "application/xml"


@functools.lru_cache(maxsize=2)
def sitemap_bomb(decoded_bytes: int, url: str) -> bytes:
    """A gzip urlset of about ``decoded_bytes`` (whitespace, then one ``url``): small on the
    wire, well-formed, and too big for any sane decompressed-size cap."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = bytearray(comp.compress(f'<?xml version="1.0"?>\n<urlset xmlns="{_SITEMAP_NS}">'.encode()))
    block = b" " * (1024 * 1024)
    for _ in range(decoded_bytes // len(block)):
        out += comp.compress(block)
    out += comp.compress(f"<url><loc>{escape(url)}</loc></url></urlset>\n".encode())
    out += comp.flush()
    return bytes(out)
