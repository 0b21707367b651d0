"""``bench.scale_layout`` (issue 27): the row-group layout measured on a real lake, and the lake
re-laid out in place, after which an index built on it answers exactly as before."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.scale_layout import main, measure, relayout
from crawlstream.index import IndexBuilder, IndexReader
from crawlstream.lake import LakeWriter
from crawlstream.settings import IndexSettings, LakeSettings
from crawlstream.urls import canonicalize

pytestmark = pytest.mark.timeout(120)


def _lake(root: Path) -> None:
    writer = LakeWriter(root, config=LakeSettings(row_group_rows=512))
    for d in range(30):
        for i in range(40 + 7 * d):
            writer.add_canonical(3, canonicalize(f"https://www.site{d}.example/a/{i}?q={i * d}"))
    writer.flush()


def _answers(root: Path) -> dict[str, tuple[int, list[str]]]:
    reader = IndexReader(root)
    try:
        with reader.pin() as idx:
            out = {}
            for d in range(30):
                page = idx.urls(f"site{d}.example", 3, 0, 1000)
                assert page is not None
                out[f"site{d}.example"] = (page.total, [i.url for i in page.items])
            return out
    finally:
        reader.close()


def test_measure_reports_bytes_and_page_costs_per_row_group_size(tmp_path: Path) -> None:
    _lake(tmp_path)
    result = measure(tmp_path, n_files=4, sizes=[64, 256])
    assert result["rows"] > 0 and set(result["sizes"]) == {"64", "256", "16384"}
    for entry in result["sizes"].values():
        assert entry["bytes_per_url"] > 0
        assert entry["first_page_uncached"]["n"] > 0
    assert result["sizes"]["16384"]["bytes_vs_16384"] == 1.0
    # smaller row groups: more footer and page overhead, never fewer bytes
    assert result["sizes"]["64"]["bytes_per_url"] > result["sizes"]["16384"]["bytes_per_url"]
    assert not list(tmp_path.glob("layout-*")), "the rewritten samples are removed"


def test_relayout_rewrites_every_file_in_place_and_the_index_answers_the_same(tmp_path: Path) -> None:
    _lake(tmp_path)
    IndexBuilder(tmp_path, index=IndexSettings(postings_shards=8)).build(full=True)
    before = _answers(tmp_path)
    files = sorted((tmp_path / "urls").rglob("*.parquet"))
    done = relayout(tmp_path, 16)
    assert done["files"] == len(files)
    assert sorted((tmp_path / "urls").rglob("*.parquet")) == files, "same names, nothing added"
    for path in files:
        md = pq.ParquetFile(path).metadata
        assert all(md.row_group(i).num_rows <= 16 for i in range(md.num_row_groups))
    again = relayout(tmp_path, 16)  # a resumed run skips what is done
    assert again["bytes_after"] == done["bytes_after"]
    IndexBuilder(tmp_path, index=IndexSettings(postings_shards=8)).build(full=True)
    assert _answers(tmp_path) == before


def test_the_command_refuses_a_directory_without_a_lake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["relayout", str(tmp_path), "--rows", "8"])
    assert exc.value.code == 2
    assert "not a lake" in capsys.readouterr().err


def test_the_command_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _lake(tmp_path)
    assert main(["relayout", str(tmp_path), "--rows", "32"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_per_row_group"] == 32
