"""What the code's own documentation points at exists (issue 24: docs a maintainer can trust).

Docstrings and comments in libs/ and services/ name modules (``crawlstream.store._warc``,
``crawlstream.index.IndexReader``) and repository files (``docs/decisions/...md``,
``tests/e2e/...py``, ``bench/...``). A rename leaves such a pointer dangling and nothing fails,
so this test resolves each one without importing anything: a dotted name by the file it would
load from (``crawlstream.services.<name>`` is ``services/<name>/``, ``crawlstream.schemas`` is
``schemas/``), then its first attribute, and an attribute of a class, in the module's syntax
tree (re-exports followed); a path in the checkout (a glob must match something;
``docs/decisions/NNN`` names ADR NNN); "README: <section>" and ``README.md#<anchor>`` by the
README's headings.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("libs", "services")

_NAME = r"[A-Za-z_]\w*"
# Not after a path or another name; a following "-", "<", "*" or "{" makes it a pattern or a
# consumer group name (crawlstream.run-stats, crawlstream.cli._<name>), not a module.
DOTTED = re.compile(rf"(?<![\w/.-])crawlstream(?:\.{_NAME})+(?![\w<*{{-])")
PATH = re.compile(r"(?<![\w/.-])(?:docs|libs|tests|bench|services|schemas|deploy|examples)/[\w./*-]*")
# README sections: "README: Metrics and logs" (a heading's first words), "README.md#configuration".
README_SECTION = re.compile(r"README: ([A-Z][\w ]*?)(?=[;).,]|$)|README\.md#([\w-]+)", re.M)
# A path right after "<project>'s " is that project's.
_OTHER_PROJECTS = re.compile(r"\b[\w.-]+'s [`'\"]*$")
# Dotted names in the crawlstream namespace that are not modules.
NOT_MODULES = {
    "crawlstream.v1": "the Avro namespace of the events (schemas/*.avsc)",
    "crawlstream.replaces": "a Parquet key-value metadata key (lake/_files.py)",
}


# The next string or comment of Python source: a lexer just good enough for this file's job,
# ~10x faster than tokenize + ast over the ~200 files (the test should take well under 5 s).
_NEXT = re.compile(r"""#|[rRbBuUfF]{0,2}(\"\"\"|'\'\'|"|')""")


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python file. A docstring here is a
    triple-quoted string that starts its line (so also a bare string statement)."""
    source = path.read_text(encoding="utf-8")
    if not (DOTTED.search(source) or PATH.search(source) or "README" in source):
        return
    pos = 0
    while (m := _NEXT.search(source, pos)) is not None:
        start, quote = m.start(), m.group(1)
        if quote is None:  # a comment
            end = source.find("\n", start)
            end = len(source) if end < 0 else end
            yield source.count("\n", 0, start) + 1, source[start:end]
            pos = end
            continue
        end = m.end()
        while True:  # the closing quote, skipping escaped characters
            close = source.find(quote, end)
            if close < 0:
                close = len(source)
                break
            if len(quote) == 1 and "\n" in source[end:close]:  # a line continuation: give up on it
                close = source.find("\n", end)
                break
            backslashes = len(source[end:close]) - len(source[end:close].rstrip("\\"))
            if backslashes % 2 == 0:
                break
            end = close + 1
        line_start = source.rfind("\n", 0, start) + 1
        if len(quote) == 3 and not source[line_start:start].strip():
            yield source.count("\n", 0, start) + 1, source[m.end() : close]
        pos = close + len(quote)


def _module_file(dotted: list[str]) -> Path | None:
    """The file a module ``crawlstream.<dotted>`` loads from, or None when there is none."""
    base, rest = REPO / "libs" / "crawlstream", dotted
    if dotted[:1] in (["services"], ["schemas"]):  # installed as crawlstream.services / .schemas
        base, rest = REPO / dotted[0], dotted[1:]
    target = base.joinpath(*rest)
    for candidate in (target / "__init__.py", target.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return target if target.is_dir() and rest else None  # a namespace package (services/<name>/)


@functools.cache
def _names(path: Path) -> tuple[dict[str, ast.ClassDef | str | None], bool]:
    """A module's top-level names and whether it has ``__getattr__``. A class maps to its
    definition, a name imported from a crawlstream module to ``"<module>:<name>"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, ast.ClassDef | str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            for alias in node.names:
                names[alias.asname or alias.name] = f"{source}:{alias.name}" if not node.level else None
        elif isinstance(node, ast.Import):
            names.update(((alias.asname or alias.name).split(".")[0], None) for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update((t.id, None) for t in targets if isinstance(t, ast.Name))
    return names, "__getattr__" in names


def _class_of(module: Path, name: str, depth: int = 0) -> ast.ClassDef | None:
    """The definition of class ``name`` of ``module``, following re-exports; None if not a class."""
    found = _names(module)[0].get(name)
    if isinstance(found, str) and found.startswith("crawlstream.") and depth < 5:
        source, _, original = found.partition(":")
        origin = _module_file(source.split(".")[1:])
        return _class_of(origin, original, depth + 1) if origin is not None and origin.is_file() else None
    return found if isinstance(found, ast.ClassDef) else None


def _class_has(cls: ast.ClassDef, attribute: str) -> bool:
    """Whether ``cls`` defines ``attribute`` (a method, a field, or ``self.<attribute> = ...``);
    True when it has a base class other than object (inherited: not followed)."""
    if any(not (isinstance(b, ast.Name) and b.id in ("object", "Protocol", "ABC")) for b in cls.bases):
        return True
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == attribute:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
        )  # fmt: skip
        if any(getattr(t, "id", None) == attribute or getattr(t, "attr", None) == attribute for t in targets):
            return True
    return False


def dotted_problem(name: str) -> str | None:
    """Why ``crawlstream.a.b.C.d`` names nothing, or None when it resolves."""
    if name in NOT_MODULES:
        return None
    parts = name.split(".")[1:]
    cut, module = 0, REPO / "libs" / "crawlstream" / "__init__.py"
    for length in range(len(parts), 0, -1):  # the longest prefix that is a module
        found = _module_file(parts[:length])
        if found is not None:
            cut, module = length, found
            break
    rest = parts[cut:]
    if not rest:
        return None
    missing = f"no module crawlstream.{'.'.join(parts[: cut + 1])}"
    if module.is_dir():
        return missing
    names, dynamic = _names(module)
    if rest[0] not in names and not dynamic:
        return f"{missing}, and {module.relative_to(REPO)} defines no {rest[0]!r}"
    cls = _class_of(module, rest[0])
    if len(rest) > 1 and cls is not None and not _class_has(cls, rest[1]):
        return f"class {rest[0]} (from {module.relative_to(REPO)}) has no {rest[1]!r}"
    return None


def path_problem(raw: str) -> str | None:
    """Why the repository path ``raw`` names nothing, or None when it does."""
    path = raw.rstrip(".")
    if "*" in path:
        return None if any(REPO.glob(path)) else f"{path} matches nothing"
    if (REPO / path).exists():
        return None
    adr = re.fullmatch(r"docs/decisions/(\d{3})", path)
    if adr and any((REPO / "docs" / "decisions").glob(f"{adr[1]}-*.md")):
        return None
    return f"{path} does not exist"


@functools.cache
def _readme_headings() -> tuple[str, ...]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return tuple(m[1].strip() for m in re.finditer(r"^#{2,4} (.+)$", text, re.M))


def readme_problem(section: str | None, anchor: str | None) -> str | None:
    """Why a README section reference names no heading, or None when it does."""
    headings = _readme_headings()
    if section is not None:
        return None if any(h.startswith(section) for h in headings) else f"README has no section {section!r}"
    slugs = {re.sub(r"[^\w -]", "", h.lower()).replace(" ", "-") for h in headings}
    return None if anchor in slugs else f"README.md has no heading #{anchor}"


def _problems() -> list[str]:
    found = []
    for root in SOURCES:
        for path in sorted((REPO / root).rglob("*.py")):
            for line, text in _texts(path):
                for m in DOTTED.finditer(text):
                    problem = dotted_problem(m.group(0))
                    if problem:
                        found.append(f"{path.relative_to(REPO)}:{line}: {m.group(0)}: {problem}")
                for m in README_SECTION.finditer(text):
                    problem = readme_problem(m[1], m[2])
                    if problem:
                        found.append(f"{path.relative_to(REPO)}:{line}: {problem}")
                for m in PATH.finditer(text):
                    if _OTHER_PROJECTS.search(text, 0, m.start()):
                        continue  # "confluent-kafka's examples/...": that project's file
                    problem = path_problem(m.group(0))
                    if problem:
                        found.append(f"{path.relative_to(REPO)}:{line}: {problem}")
    return found


def test_docstrings_and_comments_name_modules_and_files_that_exist() -> None:
    problems = _problems()
    assert problems == [], "\n".join(problems)


def test_the_resolver_tells_real_names_from_dangling_ones() -> None:
    assert dotted_problem("crawlstream.store._warc") is None
    assert dotted_problem("crawlstream.index.IndexReader") is None  # re-exported by the package
    assert dotted_problem("crawlstream.store.ContentStore.stats") is None  # a method
    assert dotted_problem("crawlstream.services.link_extractor") is None
    assert dotted_problem("crawlstream.schemas") is None
    assert dotted_problem("crawlstream.store._nowhere") is not None
    assert dotted_problem("crawlstream.index.NoSuchReader") is not None
    assert dotted_problem("crawlstream.store.ContentStore.no_such_method") is not None
    assert dotted_problem("crawlstream.services.no_such_service") is not None
    assert path_problem("docs/decisions/002") is None and path_problem("docs/decisions/999") is not None
    assert path_problem("schemas/*.avsc") is None and path_problem("tests/nowhere/*.py") is not None
    assert path_problem("bench/bench_links.py.") is None and path_problem("bench/bench_nothing.py") is not None
    assert readme_problem("Metrics and logs", None) is None and readme_problem(None, "configuration") is None
    assert readme_problem("No such section", None) is not None and readme_problem(None, "nowhere") is not None
