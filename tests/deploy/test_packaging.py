"""Installing crawlstream prints no setuptools warning, and the schemas ship whole.

setuptools warns (40 lines, "Package would be ignored") at every build when a directory with
package data has an importable name but is not a listed package, as ``schemas/history/``
was (issue 24). ``setup.py build_py`` is the build step that checks it and copies the package
data a wheel gets; it runs on a copy of the sources (nothing written to the checkout) with
the venv's setuptools, in about 2 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SOURCES = ("setup.py", "pyproject.toml", "README.md", "libs", "services", "schemas")


def test_the_build_is_quiet_and_keeps_every_schema_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in _SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # its own "warning"
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "build")],
        cwd=src, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines() if re.search(r"(?i)warn(ing)?\b", line)]
    assert warnings == [], "\n".join(warnings)
    schemas = REPO / "schemas"
    shipped = {p.relative_to(schemas) for p in schemas.rglob("*") if p.suffix in (".avsc", ".json")}
    assert {Path("history/fetch_result.3.avsc"), Path("test-vectors/url_keys.json"), Path("registry.json")} <= shipped
    built = tmp_path / "build" / "crawlstream" / "schemas"
    assert sorted(p for p in shipped if not (built / p).is_file()) == []
