"""registered_domain: the PSL algorithm on tldextract's bundled snapshot, and never the network."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crawlstream.errors import InvalidDomain
from crawlstream.urls import canonicalize, registered_domain


def _psl_vectors(shared_data: Path) -> list[tuple[str | None, str | None]]:
    vectors = []
    for line in (shared_data / "psl" / "tests.txt").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        given, expected = line.split()
        vectors.append((None if given == "null" else given, None if expected == "null" else expected))
    return vectors


def _registered_or_none(host: str | None) -> str | None:
    try:
        return registered_domain(host)  # type: ignore[arg-type]
    except InvalidDomain:
        return None


def test_all_official_psl_vectors_pass(shared_data: Path) -> None:
    """All 78 checks of publicsuffix/list tests/tests.txt, with no 'outdated snapshot' exceptions."""
    vectors = _psl_vectors(shared_data)
    assert len(vectors) == 78
    failures = [(given, expected, _registered_or_none(given)) for given, expected in vectors]
    assert [f for f in failures if f[1] != f[2]] == []


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "[::1]"),
        ("2001:db8::1", "2001:db8::1"),
        ("localhost", "localhost"),
        ("LOCALHOST", "localhost"),
        ("www.example.com.", "example.com"),
        ("foo.blogspot.com", "foo.blogspot.com"),
        ("a.b.example.example", "example.example"),
        ("www.xn--bcher-kva.de", "xn--bcher-kva.de"),
    ],
)
def test_ip_literals_localhost_and_private_suffixes(host: str, expected: str) -> None:
    assert registered_domain(host) == expected


@pytest.mark.parametrize(
    "host", ["", "com", "co.uk", "intranet", ".example.com", "a..example.com", "ex ample.com"]
)
def test_hosts_without_a_registrable_domain_raise_invalid_domain(host: str) -> None:
    with pytest.raises(InvalidDomain):
        registered_domain(host)


def test_canonicalize_falls_back_to_the_host_for_a_public_suffix() -> None:
    assert canonicalize("http://co.uk/").domain == "co.uk"
    assert canonicalize("http://intranet:8080/").domain == "intranet"


def test_registered_domain_never_touches_the_network(shared_data: Path) -> None:
    """A fresh interpreter with every socket entry point blocked computes every PSL vector."""
    script = textwrap.dedent(
        f"""
        import socket

        def _blocked(*args, **kwargs):
            raise RuntimeError("network access attempted")

        class _BlockedSocket(socket.socket):
            def __init__(self, *args, **kwargs):
                _blocked()

        socket.socket = _BlockedSocket
        socket.create_connection = _blocked
        socket.getaddrinfo = _blocked

        from crawlstream.errors import InvalidDomain
        from crawlstream.urls import canonicalize, registered_domain

        checked = 0
        for line in open({str(shared_data / "psl" / "tests.txt")!r}, encoding="utf-8"):
            line = line.strip()
            if not line or line.startswith("//") or line.startswith("null"):
                continue
            given, expected = line.split()
            try:
                got = registered_domain(given)
            except InvalidDomain:
                got = "null"
            assert got == expected, (given, expected, got)
            checked += 1
        assert canonicalize("http://www.bbc.co.uk/").domain == "bbc.co.uk"
        print(checked)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) == 77
