"""The HTTP response head kept with a stored page (for WARC export, ADR 022): how it sits in
the record's metadata line.

Two optional keys of the metadata line (inside the zstd frame, so they compress with the
page under its domain's dictionary): ``hh``, the status line and header lines as received,
joined with ``\\n`` (no CR, no trailing newline; each byte as the Unicode character of the same
number, ISO-8859-1, so any header byte survives JSON), ``ip``, the server's address, and ``rq``,
the request line and header lines the fetcher sent (encoded as ``hh``; since FetchResult id 12).
Records written before these keys existed, or by ``put`` calls without them, have neither.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["StoredResponse", "extra_meta", "response_meta", "stored_response"]

HEAD_KEY = "hh"
IP_KEY = "ip"
REQUEST_KEY = "rq"  # the request line and header lines sent, encoded as ``hh``


@dataclass(frozen=True)
class StoredResponse:
    """What a page was stored with from its HTTP response: ``head`` is the status line and the
    header lines, each ending in CRLF (no blank line); ``ip_address`` the peer, None if unknown."""

    head: bytes
    ip_address: str | None = None
    request: bytes | None = None  # the request line + header lines sent, CRLF-terminated

    def request_lines(self) -> tuple[str, list[tuple[str, str]]] | None:
        """(request line, [(name, value)...]) of the request sent, None when it was not kept."""
        if not self.request:
            return None
        line, *rest = self.request.decode("latin-1").split("\r\n")
        return line, [(n, v.strip(" \t")) for n, sep, v in (r.partition(":") for r in rest) if sep and n]

    @property
    def status_line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode("latin-1")

    def header_lines(self) -> list[tuple[str, str]]:
        """(name, value) in order, repeats kept; a line without a colon is skipped."""
        out: list[tuple[str, str]] = []
        for line in self.head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep and name:
                out.append((name, value.strip(" \t")))
        return out


def response_meta(head: bytes | None, ip_address: str | None, request: bytes | None = None) -> dict[str, str]:
    """The metadata keys for a response head, address and request head (empty when all are absent)."""
    meta: dict[str, str] = {}
    if head:
        meta[HEAD_KEY] = _text(head)
    if ip_address:
        meta[IP_KEY] = ip_address
    if request:
        meta[REQUEST_KEY] = _text(request)
    return meta


def _text(head: bytes) -> str:
    return head.decode("latin-1").replace("\r\n", "\n").rstrip("\n")


def _head(text: Any) -> bytes | None:
    """The CRLF-terminated head a ``_text`` string stands for; None when it is no such string."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return ("\r\n".join(text.split("\n")) + "\r\n").encode("latin-1")
    except UnicodeEncodeError:
        return None  # not written by response_meta: treat as absent


def stored_response(meta: dict[str, Any], url: str) -> StoredResponse | None:
    """The response head of a record's metadata, if it has one and the record is ``url``'s own
    (a body stored once for several URLs carries its first URL's head, not the others')."""
    raw = _head(meta.get(HEAD_KEY))
    if raw is None or meta.get("u") != url:
        return None
    ip = meta.get(IP_KEY)
    return StoredResponse(raw, ip if isinstance(ip, str) and ip else None, _head(meta.get(REQUEST_KEY)))


def extra_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The response keys of a metadata line, to carry over when the record is rewritten."""
    return {k: meta[k] for k in (HEAD_KEY, IP_KEY, REQUEST_KEY) if k in meta}
