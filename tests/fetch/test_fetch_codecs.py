"""Pure parts of the fetch core: bounded decoding, the address check, Retry-After, headers."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from crawlstream.fetch import is_public_address, parse_retry_after
from crawlstream.fetch._decode import UnsupportedEncoding, make_decoder
from crawlstream.fetch._outcome import kept_headers, media_type


def decode_all(encoding: str, data: bytes, *, chunk: int = 1000, step: int = 4096) -> bytes:
    decoder = make_decoder(encoding)
    out = bytearray()
    for i in range(0, len(data), chunk):
        decoder.feed(data[i : i + chunk])
        while part := decoder.read(step):
            assert len(part) <= max(step, 64 * 1024)  # brotli grows its buffer in ~32 KiB blocks
            out += part
    return bytes(out)


PAYLOAD = b"<html>" + bytes(range(256)) * 300 + b"</html>"


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        ("", PAYLOAD),
        ("identity", PAYLOAD),
        ("gzip", gzip.compress(PAYLOAD)),
        ("x-gzip", gzip.compress(PAYLOAD)),
        ("deflate", zlib.compress(PAYLOAD)),
        ("br", brotli.compress(PAYLOAD)),
    ],
)
def test_decoder_round_trips_every_supported_encoding(encoding: str, encoded: bytes) -> None:
    assert decode_all(encoding, encoded) == PAYLOAD


def test_deflate_without_zlib_header_is_decoded_raw() -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = comp.compress(PAYLOAD) + comp.flush()
    assert decode_all("deflate", raw) == PAYLOAD


def test_multi_member_gzip_is_decoded_whole_and_trailing_garbage_ignored() -> None:
    data = gzip.compress(b"first ") + gzip.compress(b"second") + b"\x00\x00garbage"
    assert decode_all("gzip", data, chunk=7) == b"first second"


def test_decoder_output_is_bounded_per_read_on_a_bomb() -> None:
    bomb = gzip.compress(bytes(8 * 1024 * 1024))
    decoder = make_decoder("gzip")
    decoder.feed(bomb)
    first = decoder.read(64 * 1024)
    assert len(first) == 64 * 1024
    assert decoder.consumed_bytes < len(bomb)


def test_unknown_content_encoding_is_rejected() -> None:
    with pytest.raises(UnsupportedEncoding):
        make_decoder("compress")


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "100.64.0.1",
        "::1",
        "fe80::1",
        "fc00::1",
        "::",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "ff02::1",
    ],
)
def test_non_public_addresses_are_not_public(ip: str) -> None:
    assert not is_public_address(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_global_unicast_addresses_are_public(ip: str) -> None:
    assert is_public_address(ip)


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now_s=now) == 120.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", now_s=now) == 60.0
    assert parse_retry_after("Mon, 01 Jan 2001 00:00:00 GMT", now_s=now) == 0.0
    assert parse_retry_after("soon", now_s=now) is None
    assert parse_retry_after(None, now_s=now) is None
    assert parse_retry_after("99999999", now_s=now) == 86400.0


def test_kept_headers_are_lowercased_bounded_and_filtered() -> None:
    headers = kept_headers(
        [
            ("Content-Type", "Text/HTML; charset=UTF-8"),
            ("Set-Cookie", "x=1"),
            ("ETag", "e" * 5000),
            ("content-type", "later"),
        ]
    )
    assert headers == {"content-type": "Text/HTML; charset=UTF-8", "etag": "e" * 2048}
    assert media_type(headers) == "text/html"


def test_retry_after_in_non_ascii_digits_is_ignored_not_raised() -> None:
    assert parse_retry_after("²", now_s=1_700_000_000.0) is None
    assert parse_retry_after("١٢٠", now_s=1_700_000_000.0) is None  # Arabic-Indic digits
