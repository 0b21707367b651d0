"""Domain names are checked before they become paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlstream.errors import InvalidDomain
from crawlstream.frontier import FileState, FrontierEntry, FrontierFiles, validate_domain


@pytest.mark.parametrize(
    "domain",
    ["example.com", "xn--bcher-kva.example", "a-b.co.uk", "localhost", "127.0.0.1", "a" * 63 + ".com"],
)
def test_lowercase_ldh_and_punycode_domains_are_accepted(domain: str) -> None:
    assert validate_domain(domain) == domain


@pytest.mark.parametrize(
    "domain",
    [
        "",
        ".",
        "..",
        "../etc",
        "../../etc/passwd",
        "a/b",
        "a\\b",
        "a..b",
        ".example.com",
        "example.com.",
        "Example.com",
        "-a.com",
        "a-.com",
        "a_b.com",
        "bücher.example",
        "a\x00b.com",
        "a b.com",
        "a" * 64 + ".com",
        ("a" * 60 + ".") * 4 + "abcdefghijklmnop",  # 260 characters
        "~",
    ],
)
def test_anything_else_is_an_invalid_domain(domain: str) -> None:
    with pytest.raises(InvalidDomain):
        validate_domain(domain)


@pytest.mark.parametrize("domain", ["../../escape", "..", "a/../../b", "/abs"])
def test_path_traversal_attempts_fail_before_any_file_or_directory_exists(tmp_path: Path, domain: str) -> None:
    files = FrontierFiles(tmp_path / "frontier")
    with pytest.raises(InvalidDomain):
        files.append(0, domain, [FrontierEntry(domain, "https://x/", 1)], FileState())
    with pytest.raises(InvalidDomain):
        files.path_for(0, domain)
    assert list(tmp_path.rglob("*")) == []
