"""The atomic-publication primitive itself: all or nothing, durable, and honest about errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from crawlstream.durable import atomic_file, replacing, write_atomically
from crawlstream.errors import StorageUnavailable


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What ``os.fsync`` was called on: 'file' or 'dir'."""
    calls: list[str] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_write_replaces_whole_and_fsyncs_file_then_directory(tmp_path: Path, fsyncs: list[str]) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"old")
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert fsyncs == ["file", "dir"]
    assert os.listdir(tmp_path) == ["f.json"]


def test_without_fsync_the_rename_is_still_atomic(tmp_path: Path, fsyncs: list[str]) -> None:
    write_atomically(tmp_path / "f", b"x", fsync=False)
    assert (tmp_path / "f").read_bytes() == b"x" and fsyncs == []


def test_mode_is_set_from_creation(tmp_path: Path) -> None:
    write_atomically(tmp_path / "secret", b"s", mode=0o600)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_exclusive_creates_once(tmp_path: Path) -> None:
    path = tmp_path / "once"
    write_atomically(path, b"first", exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomically(path, b"second", exclusive=True)
    assert path.read_bytes() == b"first" and os.listdir(tmp_path) == ["once"]


def test_an_error_while_writing_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match="half way"), atomic_file(path) as fh:
        fh.write(b"half")
        raise ValueError("half way")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


def test_io_errors_become_storage_unavailable_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "f"
    with pytest.raises(StorageUnavailable, match=r"could not write .*no-such-dir/f"):
        write_atomically(path, b"x")


def test_leftover_temporary_of_a_crashed_writer_is_replaced(tmp_path: Path) -> None:
    tmp = tmp_path / "f~compact"
    tmp.write_bytes(b"stale")
    os.chmod(tmp, 0o644)
    write_atomically(tmp_path / "f", b"new", tmp=tmp, mode=0o600)
    assert (tmp_path / "f").read_bytes() == b"new" and not tmp.exists()
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o600


def test_replacing_publishes_what_a_library_wrote_at_the_path(tmp_path: Path, fsyncs: list[str]) -> None:
    path = tmp_path / "t.parquet"
    with replacing(path) as tmp:
        assert tmp.parent == tmp_path and not tmp.exists()
        tmp.write_bytes(b"PAR1")
    assert path.read_bytes() == b"PAR1" and fsyncs == ["file", "dir"]


def test_replacing_publishes_a_directory_with_its_files_durable(tmp_path: Path, fsyncs: list[str]) -> None:
    final = tmp_path / "v1"
    with replacing(final, tmp=tmp_path / ".tmp-v1") as staging:
        staging.mkdir()
        (staging / "a").write_bytes(b"a")
        (staging / "b").write_bytes(b"b")
    assert sorted(p.name for p in final.iterdir()) == ["a", "b"]
    assert fsyncs == ["file", "file", "dir", "dir"]  # each file, the directory, its parent
    assert os.listdir(tmp_path) == ["v1"]


def test_replacing_removes_a_half_written_directory(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), replacing(tmp_path / "v1") as staging:
        staging.mkdir()
        (staging / "a").write_bytes(b"a")
        raise RuntimeError
    assert os.listdir(tmp_path) == []
