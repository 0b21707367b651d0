"""Which text encoding an HTML body is in (pure): BOM, then Content-Type, then <meta>.

The order is the HTML standard's (BOM > transport > prescan); labels follow WHATWG where
it matters for crawling: latin-1/ascii mean windows-1252, a <meta> saying UTF-16 means
UTF-8 (the bytes were already decoded as ASCII-compatible to read it).
"""

from __future__ import annotations

import codecs
import re

__all__ = ["decode_html", "sniff_charset"]

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_CT_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_PRESCAN_BYTES = 4096
_WHATWG_ALIASES = {
    "latin1": "cp1252",
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "l1": "cp1252",
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "iso_8859-1": "cp1252",
    "iso-8859-9": "cp1254",
    "tis-620": "cp874",
    "x-sjis": "shift_jis",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "x-gbk": "gb18030",
}


def _normalize(label: str, *, from_meta: bool) -> str | None:
    name = _WHATWG_ALIASES.get(label.strip().lower(), label.strip().lower())
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    if from_meta and codec.startswith("utf-16"):
        return "utf-8"
    return codec


def sniff_charset(html: bytes, content_type: str | None = None) -> tuple[str, str]:
    """(codec name, where it came from: ``bom`` | ``header`` | ``meta`` | ``default``)."""
    for bom, name in _BOMS:
        if html.startswith(bom):
            return name, "bom"
    if content_type:
        m = _CT_CHARSET.search(content_type)
        if m:
            codec = _normalize(m.group(1), from_meta=False)
            if codec:
                return codec, "header"
    m2 = _META_CHARSET.search(html, 0, _PRESCAN_BYTES)
    if m2:
        codec = _normalize(m2.group(1).decode("ascii", "replace"), from_meta=True)
        if codec:
            return codec, "meta"
    return "utf-8", "default"


def decode_html(html: bytes, content_type: str | None = None) -> str:
    """The body as text; undecodable bytes become U+FFFD, never an error."""
    codec, source = sniff_charset(html, content_type)
    if source == "bom":
        html = html[len(codecs.BOM_UTF8) if codec == "utf-8" else 2 :]
    return html.decode(codec, errors="replace")
