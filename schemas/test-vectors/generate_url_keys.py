"""Regenerate url_keys.json from crawlstream.urls (deterministic: same code, same bytes).

    .venv/bin/python schemas/test-vectors/generate_url_keys.py          # rewrite the file
    .venv/bin/python schemas/test-vectors/generate_url_keys.py --check  # exit 1 if stale

tests/urls/test_vectors.py checks the committed file against the code, so a change to the
canonical form or key layout cannot slip in without regenerating (and versioning) the vectors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from crawlstream.urls import (
    canonicalize,
    domain_checksum,
    domain_prefix,
    fnv1a_64,
    partition_for,
    url_key,
)

OUTPUT = Path(__file__).with_name("url_keys.json")

# (raw url, what it exercises)
CASES: list[tuple[str, str]] = [
    ("http://example.com/", "plain"),
    ("http://example.com", "empty path becomes /"),
    ("HTTP://EXAMPLE.COM/Path", "scheme and host lowercased, path case kept"),
    ("https://www.example.com/index.html", "subdomain of a .com"),
    ("http://example.com:80/", "default http port dropped"),
    ("https://example.com:443/a", "default https port dropped"),
    ("http://example.com:8080/a", "non-default port kept"),
    ("https://example.com:80/", "port 80 is not the https default"),
    ("http://example.com/a#section-2", "fragment dropped"),
    ("http://example.com/a?", "empty query dropped"),
    ("http://example.com/?b=2&a=1", "query sorted by key"),
    ("http://example.com/?b=2&a=1&b=1&a=3", "duplicate keys keep their relative order"),
    ("http://example.com/?a=1&&b=2&", "empty parameters dropped"),
    ("http://example.com/?q=caf%c3%a9&x=%7e", "hex uppercased, unreserved decoded in query"),
    ("http://example.com/search?q=a b", "space encoded in query"),
    ("http://example.com/a/./b/../c", "dot segments removed"),
    ("http://example.com/a/b/../../../c", "dot segments above the root"),
    ("http://example.com//a///b//", "duplicate slashes collapsed, trailing slash kept"),
    ("http://example.com/a/%2e%2E/b", "percent-encoded dots are dot segments"),
    ("http://example.com/%7Euser/%41%42c", "unreserved escapes decoded"),
    ("http://example.com/a%2fb%3f", "reserved escapes kept, hex uppercased"),
    ("http://example.com/caf\u00e9/\u65e5\u672c", "non-ASCII path encoded as UTF-8"),
    ("http://example.com/a b<c>", "space and <> encoded in path"),
    ("http://example.com/dir/", "trailing slash kept"),
    ("http://user:secret@example.com/private", "userinfo dropped"),
    ("http:\\\\example.com\\a\\b", "backslashes are slashes"),
    ("  http://example.com/trim \n", "surrounding whitespace stripped"),
    ("http://exa\tmple.com/", "tab removed"),
    ("http://example.com./", "trailing dot of host stripped"),
    ("http://b\u00fccher.de/", "IDN to punycode"),
    ("http://www.\u00e4\u00f6\u00fc.example.com/", "IDN label under a .com"),
    ("http://\u98df\u72ee.\u516c\u53f8.cn/", "IDN registered domain under an IDN suffix"),
    ("http://www.xn--85x722f.xn--fiqs8s/", "punycode kept as given"),
    ("http://B\u00dcCHER.DE/", "IDN uppercase mapped by UTS #46"),
    ("http://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/", "full-width letters mapped by UTS #46"),
    ("http://127.0.0.1/", "IPv4"),
    ("http://127.0.0.1:8080/x", "IPv4 with port"),
    ("http://0x7f.1/", "IPv4 in WHATWG shorthand"),
    ("http://3232235777/", "IPv4 as one number"),
    ("http://[::1]/", "IPv6 loopback"),
    ("http://[2001:DB8:0:0:0:0:0:1]:8443/", "IPv6 compressed, lowercased"),
    ("http://localhost/", "localhost"),
    ("http://localhost:3000/api?z=1&y=2", "localhost with port and query"),
    ("http://a.b.c.d.e.example.com/", "deep subdomain"),
    ("http://www.bbc.co.uk/news", "two-label public suffix"),
    ("http://a.b.city.kobe.jp/", "PSL exception rule"),
    ("http://x.y.c.mm/", "PSL wildcard rule"),
    ("http://foo.blogspot.com/2008/03/post.html", "private PSL section"),
    ("https://someone.github.io/project/", "private PSL section (github.io)"),
    ("http://bucket.s3.amazonaws.com/key", "private PSL section (s3)"),
    ("http://a.b.example.example/", "unlisted TLD: default rule"),
    ("http://intranet/", "single-label host: domain falls back to the host"),
    ("http://co.uk/", "public suffix as host: domain falls back to the host"),
    ("http://my_host.example.org/", "underscore in host"),
    ("https://en.wikipedia.org/wiki/URL_normalization", "real-world"),
    ("https://www.google.com/search?q=url+key&hl=en&client=firefox", "plus kept, query sorted"),
    ("http://example.com/p?utm_source=x&id=7#top", "tracking parameters are kept"),
    ("https://EXAMPLE.com:443//a/./b/../c/?B=2&a=1#f", "everything at once"),
    ("http://example.com/%", "lone percent kept"),
    ("http://example.com/?a='q'", "apostrophe encoded in query"),
    ("../c?x=1", "relative reference (base http://example.com/a/b)"),
]
BASES = {"../c?x=1": "http://example.com/a/b"}


def build() -> dict[str, Any]:
    vectors = []
    for raw, note in CASES:
        canon = canonicalize(raw, BASES.get(raw))
        key = url_key(canon)
        vectors.append(
            {
                "raw": raw,
                "base": BASES.get(raw),
                "note": note,
                "canonical": canon.url,
                "host": canon.host,
                "registered_domain": canon.domain,
                "domain_checksum": domain_checksum(canon.domain),
                "partition_p128": partition_for(canon.domain, 128),
                "partition_p4": partition_for(canon.domain, 4),
                "fnv1a_64": fnv1a_64(canon.url.encode("utf-8")),
                "url_key": key,
                "url_key_hex": f"0x{key:016x}",
                "domain_prefix": domain_prefix(canon.domain),
            }
        )
    return {
        "description": "crawlstream url_key test vectors; see schemas/URL_KEYS.md",
        "key_version": 1,
        "checksum": "xxh3_64(utf8(registered_domain)) & 0x7F",
        "url_key": "(checksum << 56) | (fnv1a_64(utf8(canonical)) & 0x00FFFFFFFFFFFFFF)",
        "partition": "checksum % P, P divides 128",
        "domain_prefix": "format(xxh3_64(utf8(registered_domain)), '016x')[:2]",
        "vectors": vectors,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            sys.stderr.write(f"{OUTPUT} is stale: run {Path(__file__).name} to regenerate\n")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
