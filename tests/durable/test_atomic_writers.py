"""Every file the project publishes whole goes through ``crawlstream.durable``'s one commit.

Each test runs a real writer on real files in a tmp dir, with ``_atomic._publish`` (the single
fsync + rename + directory fsync that ``write_atomically``, ``atomic_file`` and ``replacing``
end in) wrapped by a recorder that still does the real work, and checks the writer's file was
published through it. A static check keeps renames out of every other module.
"""

from __future__ import annotations

import ast
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlstream.durable import _atomic

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The targets published through ``_atomic._publish`` during the test."""
    seen: list[Path] = []
    real = _atomic._publish

    def recording(tmp: Path, path: Path, **kwargs: bool) -> None:
        real(tmp, path, **kwargs)
        seen.append(Path(path))

    monkeypatch.setattr(_atomic, "_publish", recording)
    yield seen


def _no_temporaries(directory: Path) -> None:
    """A clean publication leaves no temporary file behind."""
    left = [p.name for p in directory.rglob("*") if ".tmp" in p.name or p.name.endswith(("~compact", "~lanetmp"))]
    assert left == []


# -- one writer per test -----------------------------------------------------------------------


def test_api_tokens_file(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.api import add_token, ensure_tokens_file, revoke_token
    from crawlstream.api._acl import fingerprint

    path = tmp_path / "conf" / "tokens.json"
    assert ensure_tokens_file(path) is True
    assert ensure_tokens_file(path) is False  # exists: created once
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = add_token(path, [3], delete=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    revoke_token(path, fingerprint(token))
    assert published == [path, path, path]
    _no_temporaries(tmp_path)


def test_tokens_file_created_exclusively_keeps_the_first_writer(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.api._tokens import _write_doc, new_token

    path = tmp_path / "tokens.json"
    first = {new_token(): {"datasets": "*", "delete": True}}
    _write_doc(path, first, exclusive=True)
    with pytest.raises(FileExistsError):
        _write_doc(path, {new_token(): {"datasets": "*", "delete": True}}, exclusive=True)
    assert json.loads(path.read_text()) == first
    assert published == [path]
    _no_temporaries(tmp_path)


def test_crawl_stats(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.crawl._stats import CrawlStats, load_stats, save_stats

    path = tmp_path / "crawl" / "stats.json"
    stats = CrawlStats()
    stats.offsets[0] = 12
    save_stats(path, stats)
    assert load_stats(path).offsets == {0: 12}
    assert published == [path]
    _no_temporaries(tmp_path)


def test_replay_plan(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.replay._plan import STATE_FILE, ReplayState

    ReplayState("crawlstream.replay.x", ["urls.records"], 1).save(tmp_path)
    assert json.loads((tmp_path / STATE_FILE).read_text())["group"] == "crawlstream.replay.x"
    assert published == [tmp_path / STATE_FILE]
    _no_temporaries(tmp_path)


@pytest.mark.parametrize("lane", [False, True])
def test_frontier_compaction_and_rewrite(tmp_path: Path, published: list[Path], lane: bool) -> None:
    from crawlstream.frontier import HEADER_SIZE, FileState, FrontierEntry, FrontierFiles

    files = FrontierFiles(tmp_path)
    entries = [FrontierEntry("a.io", f"https://a.io/{i}", i, priority=int(lane)) for i in range(4)]
    state = files.append(0, "a.io", entries, FileState(), lane=lane)
    first_two = [after for _, after in files.read(0, "a.io", state, limit=2, lane=lane)]
    state = files.compact(0, "a.io", FileState(state.generation, first_two[-1], state.size), lane=lane)
    assert [e.url for e, _ in files.read(0, "a.io", state, limit=10, lane=lane)] == [e.url for e in entries[2:]]
    state = files.rewrite(0, "a.io", state, entries[:1], lane=lane)
    assert state.size > HEADER_SIZE
    path = files.path_for(0, "a.io", lane=lane)
    assert published == [path, path]
    _no_temporaries(tmp_path)


def test_bloom_snapshot(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.dedupe._deduper import Deduper

    deduper = Deduper(tmp_path / "dedupe", 1000, 0.01)
    deduper.load_partition(2)
    assert deduper.check_and_add(2, [(1, "https://a.io/"), (2, "https://b.io/")]) == [True, True]
    path = deduper.flush_partition(2, 17)
    assert Deduper(tmp_path / "dedupe", 1000, 0.01).load_partition(2) == 17
    assert published == [path]
    _no_temporaries(tmp_path)


def test_lake_file(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.lake import LakeWriter, list_lake_files
    from crawlstream.urls import canonicalize

    writer = LakeWriter(tmp_path)
    for i in range(5):
        writer.add_canonical(1, canonicalize(f"https://a{i % 2}.example/{i}"), ts_ms=i)
    written = sorted(f.path for f in writer.flush())
    writer.close()
    assert written and sorted(published) == written
    assert sorted(tmp_path / f.path for f in list_lake_files(tmp_path)) == written
    _no_temporaries(tmp_path)


def test_index_version_and_manifest(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.index import IndexBuilder
    from crawlstream.index._manifest import MANIFEST_NAME, index_dir
    from crawlstream.lake import LakeWriter
    from crawlstream.settings import IndexSettings
    from crawlstream.urls import canonicalize

    writer = LakeWriter(tmp_path)
    writer.add_canonical(1, canonicalize("https://a.example/x"), ts_ms=1)
    writer.close()
    published.clear()
    result = IndexBuilder(tmp_path, index=IndexSettings(postings_shards=2)).build()
    version_dir = index_dir(tmp_path) / result.version
    assert version_dir in published and index_dir(tmp_path) / MANIFEST_NAME in published
    assert sorted(p.name for p in version_dir.iterdir())  # the files arrived with the directory
    assert [p.name for p in index_dir(tmp_path).iterdir() if p.name.startswith(".tmp-")] == []


def _store_with_pages(data_dir: Path) -> None:
    from crawlstream.store import ContentStore

    with ContentStore(data_dir / "store") as store:
        for i in range(3):
            store.put(f"https://a.example/{i}", b"<html>page %d</html>" % i, content_type="text/html", status=200)


def test_warc_export_one_file_and_parts(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.cli import main
    from crawlstream.store import ContentStore
    from crawlstream.store._warc import export_warc_files

    _store_with_pages(tmp_path)
    out = tmp_path / "out" / "all.warc.gz"
    out.parent.mkdir()
    published.clear()
    assert main(["export-warc", "--data-dir", str(tmp_path), str(out)]) == 0
    assert published == [out]
    published.clear()
    with ContentStore(tmp_path / "store") as store:
        files, written, skipped = export_warc_files(store, out, 1)  # one page per part
    assert (written, skipped) == (3, 0) and len(files) == 3
    assert published == files
    with ContentStore(tmp_path / "store") as store:
        empty, written, _ = export_warc_files(store, tmp_path / "out" / "none.warc.gz", 1, domain="b.example")
    assert written == 0 and len(empty) == 1 and empty[0].stat().st_size > 0  # its warcinfo
    _no_temporaries(tmp_path / "out")


def test_warc_export_that_fails_leaves_no_file(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.errors import StorageUnavailable
    from crawlstream.store import ContentStore
    from crawlstream.store._warc import export_warc_files

    _store_with_pages(tmp_path)
    out = tmp_path / "missing-dir" / "all.warc.gz"
    with ContentStore(tmp_path / "store") as store, pytest.raises(StorageUnavailable, match=r"all-00000\.warc\.gz"):
        export_warc_files(store, out, 1)
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_content_store_marker_and_dictionaries(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.store import ContentStore

    root = tmp_path / "store"
    with ContentStore(root) as store:
        store.put("https://a.example/1", b"<html>one</html>", content_type="text/html", status=200)
        store.rebuild_index()
        store.train_dictionaries({"a.example": [b"<html><body>sample %d text</body></html>" % i for i in range(200)]})
    names = {p.relative_to(root).as_posix() for p in published}
    assert "FORMAT" in names  # the index is a SQLite database (ADR 036): its own transactions, no files published
    assert any(n.startswith("dicts/") and n.endswith(".zdict.zst") for n in names)
    _no_temporaries(root)


def test_embedded_bus_metadata_and_offsets(tmp_path: Path, published: list[Path]) -> None:
    from crawlstream.bus import EmbeddedBus

    root = tmp_path / "bus"
    with EmbeddedBus(root, default_partitions=2) as bus:
        bus.create_topics(["t"], 2)
        producer = bus.producer()
        producer.produce("t", b"v", partition=1)
        producer.flush()
        producer.close()
        consumer = bus.consumer("g")
        consumer.subscribe(["t"])
        got = []
        for _ in range(100):
            got += consumer.consume(10, 0.05)
            if got:
                break
        consumer.commit()
        consumer.close()
    names = {p.relative_to(root).as_posix() for p in published}
    assert "topics/t/meta.json" in names
    assert "groups/g/offsets.json" in names
    _no_temporaries(root)


# -- the static check --------------------------------------------------------------------------

RENAME_ALLOWED = {
    ("libs/crawlstream/dedupe/_deduper.py", "os.replace"): "moves a corrupt snapshot aside (quarantine)",
    ("libs/crawlstream/index/_builder.py", "os.rename"): "moves a version directory to trash before rmtree",
}


def _rename_calls(path: Path) -> Iterator[tuple[int, str]]:
    """os.replace / os.rename / os.link / shutil.move calls, and ``x.rename(...)`` or a one-argument
    ``x.replace(y)`` (``Path.replace``; ``str.replace`` takes two)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if (owner, func.attr) in {("os", "replace"), ("os", "rename"), ("os", "link"), ("shutil", "move")}:
            yield node.lineno, f"{owner}.{func.attr}"
        elif owner not in {"os", "dataclasses"} and func.attr == "rename":
            yield node.lineno, ".rename"
        elif owner != "dataclasses" and func.attr == "replace" and len(node.args) == 1 and not node.keywords:
            yield node.lineno, ".replace"


def test_no_module_renames_files_outside_durable() -> None:
    found = {}
    for top in ("libs", "services"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("libs/crawlstream/durable/"):
                continue
            for line, call in _rename_calls(path):
                if (rel, call) not in RENAME_ALLOWED:
                    found[f"{rel}:{line}"] = call
    assert found == {}, "publish files with crawlstream.durable (write_atomically, atomic_file, replacing)"


def test_the_allowlisted_renames_say_why() -> None:
    for rel, call in RENAME_ALLOWED:
        lines = (REPO / rel).read_text().splitlines()
        hits = [line for line in lines if f"{call}(" in line]
        assert hits and all("# not a publication:" in line for line in hits), rel
