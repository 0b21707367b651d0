"""Hostile domain names and URLs never make a file outside the data dir, and never crash.

Every place a domain or a URL-derived name can reach the file system is fed names built to
escape or break it: traversal (``../../etc``), separators (``/``, ``\\``, NUL), names too long
for a label, a host or a file name, unicode look-alikes, reserved device names, names that
differ only in case. Each is either refused as bad data (``InvalidDomain``/``InvalidUrl``,
both ``BadDataError``, counted where the pipeline counts them) or stored under the data dir;
the test then walks the tree, resolving every path, and checks nothing else under
``tmp_path`` appeared. Where a name was *stored*, it must read back as itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlstream.errors import BadDataError, InvalidDomain, InvalidUrl
from crawlstream.frontier import FileState, FrontierEntry, FrontierFiles, validate_domain
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.ingest import ingest_files
from crawlstream.lake import LakeWriter
from crawlstream.politeness import Scheduler
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.store import ContentStore, StoreConfig
from crawlstream.store._warc import export_warc
from crawlstream.urls import canonicalize

pytestmark = pytest.mark.timeout(60)

HOSTILE_DOMAINS = [
    "",
    ".",
    "..",
    "../../etc",
    "../../../../../../etc/passwd",
    "..\\..\\windows\\system32",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "a\x00b.com",
    "example.com\x00.evil",
    "a\nb.com",
    "a b.com",
    "a:b.com",
    "a|b.com",
    "*.com",
    "?.com",
    "~",
    "~compact",
    "example.com~compact",
    "%2e%2e",
    "%2e%2e%2f%2e%2e%2fetc",
    ".example.com",
    "example.com.",
    "-example.com",
    "Example.com",
    "EXAMPLE.COM",
    "CON",
    "NUL",
    "AUX.com",
    "еxample.com",  # Cyrillic 'е'
    "exam\u200bple.com",  # zero-width space
    "ｅｘａｍｐｌｅ.com",  # full-width
    "bücher.example",
    "\udcff.com",  # a lone surrogate (undecodable bytes)
    "a" * 64 + ".com",  # label too long
    ("a" * 63 + ".") * 4 + "com",  # 259 characters
    "a" * 4096,
    "a." * 200 + "com",
]
# Valid names that must work (and keep their case-folded identity).
ODD_BUT_VALID_DOMAINS = [
    "con",
    "nul",
    "aux.com",
    "com1",
    "xn--e1awd7f.com",  # the punycode of a look-alike: a name like any other
    "xn--bcher-kva.example",
    "a" * 63 + ".com",
    "0.0.0.0",
    "127.0.0.1",
    "1" * 63,
]
HOSTILE_URL_HOSTS = [
    "..",
    "%2e%2e",
    "%2e%2e%2f%2e%2e",
    "a%2fb.com",
    "a%5cb.com",
    "a%00b.com",
    "..%2f..%2fetc",
    "CON",
    "Example.COM",
    "EXAMPLE.com",
    "еxample.com",
    "ｅｘａｍｐｌｅ.com",
    "exam\u200bple.com",
    "a" * 64 + ".com",
    ("a" * 63 + ".") * 4 + "com",
    "my_host.example.com",
    "foo_bar.com",
    "[::1]",
    "127.1",
]


def files_under(root: Path) -> list[Path]:
    return [Path(dirpath) / name for dirpath, dirs, files in os.walk(root) for name in dirs + files]


def assert_contained(tmp_path: Path, data_dir: Path) -> None:
    """Every file and directory lies under ``data_dir`` once resolved, and ``tmp_path`` holds
    nothing but ``data_dir`` (if made at all) and the untouched ``outside`` sentinel."""
    root = data_dir.resolve()
    for path in files_under(data_dir):
        assert path.resolve().is_relative_to(root), path
        assert not path.is_symlink(), path
    assert {p.name for p in tmp_path.iterdir()} <= {data_dir.name, "outside"}
    assert list((tmp_path / "outside").iterdir()) == []


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    return tmp_path / "data"


# -- frontier files ---------------------------------------------------------------------------


def exercise_frontier(files: FrontierFiles, domain: str) -> bool:
    """Append, read, compact, reconcile and remove ``domain``'s file; False if refused."""
    entry = FrontierEntry(domain, f"http://{domain}/", 1)
    try:
        state = files.append(3, domain, [entry, entry], FileState())
    except InvalidDomain:
        for call in (
            lambda: files.path_for(3, domain),
            lambda: files.read(3, domain, FileState(0, 20, 40)),
            lambda: files.reconcile(3, domain, FileState()),
            lambda: files.compact(3, domain, FileState(0, 20, 40)),
            lambda: files.remove(3, domain),
        ):
            with pytest.raises(InvalidDomain):
                call()
        return False
    assert files.path_for(3, domain).name == domain
    got = files.read(3, domain, state, limit=1)
    assert [e.url for e, _end in got] == [entry.url]
    state = files.compact(3, domain, FileState(state.generation, got[0][1], state.size))
    state = files.reconcile(3, domain, state)
    assert [e.url for e, _end in files.read(3, domain, state, limit=5)] == [entry.url]
    files.sync()
    return True


@pytest.mark.parametrize("domain", HOSTILE_DOMAINS)
def test_hostile_domain_is_refused_by_the_frontier_before_any_path_exists(
    tmp_path: Path, data_dir: Path, domain: str
) -> None:
    files = FrontierFiles(data_dir / "frontier")
    assert not exercise_frontier(files, domain)
    assert files_under(data_dir) == []
    assert_contained(tmp_path, data_dir)


@pytest.mark.parametrize("domain", ODD_BUT_VALID_DOMAINS)
def test_odd_but_valid_domain_gets_its_own_file_under_the_frontier_root(
    tmp_path: Path, data_dir: Path, domain: str
) -> None:
    files = FrontierFiles(data_dir / "frontier")
    assert exercise_frontier(files, domain)
    assert_contained(tmp_path, data_dir)


@pytest.mark.parametrize("length", [246, 247, 248, 250, 253])
def test_longest_accepted_domain_still_compacts_and_reconciles(tmp_path: Path, data_dir: Path, length: int) -> None:
    """Regression: a valid 248-253 character name passed validation, but ``<domain>~compact`` is
    past the 255-byte file name limit, so reconcile and compact raised StorageUnavailable (a
    transient error: the scheduler restarted and failed the same way on every replay)."""
    labels = ["a" * 63, "b" * 63, "c" * 63]
    domain = ".".join(labels) + "." + "d" * (length - 3 * 64)
    assert len(domain) == length
    files = FrontierFiles(data_dir / "frontier")
    assert exercise_frontier(files, domain) == (length <= 247)
    assert_contained(tmp_path, data_dir)


def test_names_differing_only_in_case_never_share_or_split_a_file(tmp_path: Path, data_dir: Path) -> None:
    files = FrontierFiles(data_dir / "frontier")
    for name in ("example.com", "Example.com", "EXAMPLE.COM"):
        canonical = canonicalize(f"http://{name}/").domain
        files.append(0, canonical, [FrontierEntry(canonical, f"http://{canonical}/", 1)], FileState())
    assert [p.name for p in files_under(data_dir) if p.is_file()] == ["example.com"]
    assert_contained(tmp_path, data_dir)


# Derandomized (the same examples on every run), no deadline (2 shared cores), no example database.
_PROFILE = settings(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_HOSTILE_ALPHABET = st.sampled_from([*"abz09-._/\\\x00~%: \n", "..", "xn--", "\u0435", "\u200b", "\udcff", "Ａ"])


@settings(_PROFILE, max_examples=300)
@given(
    st.one_of(
        st.lists(_HOSTILE_ALPHABET, max_size=40).map("".join),
        st.from_regex(r"[a-z0-9.\-]{1,70}(\.[a-z0-9\-]{1,63}){0,4}", fullmatch=True),
    )
)
def test_any_domain_string_is_refused_or_stays_under_the_frontier_root(domain: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "outside").mkdir()
        data_dir = base / "data"
        stored = exercise_frontier(FrontierFiles(data_dir / "frontier"), domain)
        if stored:
            assert validate_domain(domain) == domain
        assert_contained(base, data_dir)


# -- the scheduler (what consumes urls.frontier) ------------------------------------------------


def test_scheduler_counts_hostile_domains_and_keeps_the_valid_ones(
    tmp_path: Path, data_dir: Path, redis_client: redis.Redis
) -> None:
    """A foreign producer can put any string in DiscoveredUrl.domain: skipped, counted, no crash."""
    scheduler = Scheduler(redis_client, data_dir / "frontier", clock=lambda: 1000.0)
    scheduler.load_partition(2)
    hostile = [FrontierEntry(d, "http://example.com/", i) for i, d in enumerate(HOSTILE_DOMAINS)]
    long_valid = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # 253: refused (file name limit)
    valid = [FrontierEntry(d, f"http://{d}/", 1000 + i) for i, d in enumerate(ODD_BUT_VALID_DOMAINS)]
    accepted = scheduler.enqueue(2, [*hostile, FrontierEntry(long_valid, f"http://{long_valid}/", 99), *valid])
    assert accepted == len(valid)
    assert scheduler.stats["skipped_invalid_domain"] == len(hostile) + 1
    scheduler.flush_partition(2)
    scheduler.drop_partition(2)
    assert scheduler.load_partition(2) >= 0  # reloads: reconciles every stored domain
    stored = sorted(p.name for p in files_under(data_dir) if p.is_file())
    assert stored == sorted(ODD_BUT_VALID_DOMAINS)
    assert_contained(tmp_path, data_dir)


# -- from a URL: the canonicalizer decides the domain -------------------------------------------


def url_to_frontier(files: FrontierFiles, url: str) -> str:
    try:
        canon = canonicalize(url)
    except InvalidUrl:
        return "invalid_url"
    return "stored" if exercise_frontier(files, canon.domain) else "invalid_domain"


@pytest.mark.parametrize("host", HOSTILE_URL_HOSTS)
def test_hostile_url_host_is_refused_or_filed_under_its_canonical_domain(
    tmp_path: Path, data_dir: Path, host: str
) -> None:
    files = FrontierFiles(data_dir / "frontier")
    outcome = url_to_frontier(files, f"http://{host}/../../etc/passwd")
    assert outcome in ("invalid_url", "invalid_domain", "stored")
    for path in files_under(data_dir):
        if path.is_file():
            assert path.name == canonicalize(f"http://{host}/").domain
    assert_contained(tmp_path, data_dir)


@settings(_PROFILE, max_examples=200)
@given(st.lists(_HOSTILE_ALPHABET, min_size=1, max_size=30).map("".join), st.sampled_from(["http", "https"]))
def test_any_url_host_is_refused_or_stays_under_the_frontier_root(host: str, scheme: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "outside").mkdir()
        data_dir = base / "data"
        url_to_frontier(FrontierFiles(data_dir / "frontier"), f"{scheme}://{host}/x")
        assert_contained(base, data_dir)


# -- content store, WARC export ----------------------------------------------------------------


@pytest.fixture
def store(data_dir: Path) -> Iterator[ContentStore]:
    with ContentStore(data_dir / "store", config=StoreConfig(fsync="never")) as s:
        yield s


def test_content_store_refuses_or_contains_hostile_urls(tmp_path: Path, data_dir: Path, store: ContentStore) -> None:
    stored = 0
    for i, host in enumerate([*HOSTILE_URL_HOSTS, *(d for d in HOSTILE_DOMAINS if d)]):
        try:
            store.put(f"http://{host}/../../../etc/passwd?x={i}", b"<html>%d</html>" % i, content_type="text/html")
            stored += 1
        except BadDataError:
            pass
    assert 0 < stored < len(HOSTILE_URL_HOSTS) + len(HOSTILE_DOMAINS)
    out = io.BytesIO()
    written, skipped = export_warc(store, out, domain=None)
    assert (written, skipped) == (stored, 0)
    for domain in HOSTILE_DOMAINS:  # a filter is only compared, never a path
        assert export_warc(store, io.BytesIO(), domain=domain)[0] in (0, 1)
    store.sync()
    assert store.verify().ok
    assert_contained(tmp_path, data_dir)


def test_quarantine_of_a_hostile_url_record_stays_beside_its_segment(tmp_path: Path, data_dir: Path) -> None:
    url = "http://CON.Example.COM/..%2f..%2fetc/../../passwd"
    with ContentStore(data_dir / "store", config=StoreConfig(fsync="never")) as store:
        store.put(url, bytes(range(256)) * 64, content_type="text/html")
        victim = store.entry(url)
        assert victim is not None
    seg = data_dir / "store" / "segments" / victim.location.segment
    data = bytearray(seg.read_bytes())
    data[victim.location.offset + victim.location.length - 10] ^= 0x55
    seg.write_bytes(bytes(data))
    with ContentStore(data_dir / "store", config=StoreConfig(fsync="never")) as store:
        assert not store.verify().ok
    assert seg.with_name(seg.name + ".invalid").exists()
    assert_contained(tmp_path, data_dir)


# -- lake, ingest rejects, index ---------------------------------------------------------------


def test_ingest_of_hostile_urls_writes_only_under_the_data_dir_and_counts_rejects(
    tmp_path: Path, data_dir: Path
) -> None:
    hosts = HOSTILE_URL_HOSTS + [d for d in HOSTILE_DOMAINS if d and "\n" not in d and "\x00" not in d]
    lines = [f"http://{h}/../../etc/passwd" for h in hosts if "\udcff" not in h]
    src = data_dir / "in" / "..urls.txt"
    src.parent.mkdir(parents=True)
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with LakeWriter(data_dir, config=LakeSettings(zstd_level=1)) as writer:
        stats = ingest_files([src], 7, writer, fmt="text", rejects_dir=data_dir / "rejects")
    assert stats.rows == len(lines)
    assert stats.valid + sum(stats.invalid.values()) == stats.rows
    assert stats.valid > 0 and sum(stats.invalid.values()) > 0
    for path in files_under(data_dir / "urls"):
        rel = path.relative_to(data_dir / "urls").parts
        assert rel[0] == "dataset_id=7" and (len(rel) == 1 or rel[1].startswith("domain_prefix="))
    assert_contained(tmp_path, data_dir)


def test_index_of_a_hostile_lake_answers_hostile_queries_with_nothing(tmp_path: Path, data_dir: Path) -> None:
    urls = [f"http://{h}/p" for h in HOSTILE_URL_HOSTS]
    with LakeWriter(data_dir, config=LakeSettings(zstd_level=1)) as writer:
        for url in urls:
            with contextlib.suppress(InvalidUrl):
                writer.add_canonical(3, canonicalize(url))
    IndexBuilder(data_dir, index=IndexSettings(postings_shards=4)).build()
    reader = IndexReader(data_dir)
    try:
        pinned = reader.pin()
        try:
            assert pinned.datasets_for_domain("example.com") is not None
            for domain in HOSTILE_DOMAINS:
                if domain in ("127.0.0.1", "example.com"):
                    continue
                result = pinned.datasets_for_domain(domain)
                assert result is None, domain
        finally:
            pinned.release()
    finally:
        reader.close()
    assert_contained(tmp_path, data_dir)
