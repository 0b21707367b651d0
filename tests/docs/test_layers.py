"""The layers point down (ADR 027): the library never imports the services above it, and no
module of the runtime imports the dev tools (local servers, the synthetic web).

Imports are read from the source with ``ast`` (module level and inside functions alike), so a
lazy import is caught too; a subprocess then checks what a service process really loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from crawlstream.roles import ROLES

REPO = Path(__file__).resolve().parents[2]
LIBS = REPO / "libs" / "crawlstream"
SERVICES = REPO / "services"
# The CLI's dev commands: each loads a dev tool inside its command function, never at import.
DEV_COMMANDS = frozenset({"cli/_demo.py", "cli/_demo_web.py", "cli/_local_kafka.py", "cli/_local_s3.py"})


def _imports(path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, at module level) for every import statement of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, id(node) in top
            for alias in node.names:  # ``from crawlstream import services``
                yield f"{node.module}.{alias.name}", id(node) in top


def _library_modules() -> list[Path]:
    return sorted(LIBS.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(LIBS).as_posix()


def test_the_library_never_imports_the_services() -> None:
    offenders = [
        f"{_rel(path)} imports {name}"
        for path in _library_modules()
        for name, _ in _imports(path)
        if name == "crawlstream.services" or name.startswith("crawlstream.services.")
    ]
    assert not offenders, offenders


def test_no_runtime_module_imports_the_dev_tools() -> None:
    offenders = []
    for path in _library_modules():
        rel = _rel(path)
        if rel.startswith("devtools/"):
            continue
        for name, top_level in _imports(path):
            is_dev = name == "crawlstream.devtools" or name.startswith("crawlstream.devtools.")
            if is_dev and (rel not in DEV_COMMANDS or top_level):
                offenders.append(f"{rel} imports {name}" + (" at module level" if top_level else ""))
    assert not offenders, offenders


def test_each_service_main_is_only_its_entry_point() -> None:
    """services/<name>/main.py holds no logic: the wiring is the library's ``service`` module."""
    mains = sorted(SERVICES.glob("*/main.py"))
    assert {p.parent.name.replace("_", "-") for p in mains} == set(ROLES)
    for path in mains:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)]
        assert not defined, (
            f"{path}: {[n.name for n in defined]} belong in {ROLES[path.parent.name.replace('_', '-')].module_name}"
        )
        imported = {name for name, _ in _imports(path) if name.startswith("crawlstream")}
        assert imported <= {"crawlstream.cli", "crawlstream.cli.main"}, (path, imported)


def test_a_service_process_loads_no_dev_tool_and_no_services_package() -> None:
    """What ``crawlstream service <name>`` imports: the CLI with every command registered, then
    each service's wiring."""
    code = (
        "import sys\n"
        "from crawlstream.cli import _parser\n"
        "from crawlstream.roles import ROLES\n"
        "_parser()\n"
        "for role in ROLES.values(): role.module()\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('crawlstream'))))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert "crawlstream.dedupe.service" in loaded and "crawlstream.fetch.service" in loaded
    assert not [m for m in loaded if m.startswith(("crawlstream.devtools", "crawlstream.services"))]
