"""docs/architecture.md stays true: every ``file.py:name`` it names exists, every path it names
is there, and every large module and long function of the domains has its line in it (and only
those: a line for one no longer over the limit goes)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
DOMAIN = ROOT / "control_plane" / "domain"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

REFERENCE = re.compile(r"`([\w./-]+\.py):([\w.]+)`")
EXPLAINED = re.compile(r"^- `(control_plane/domain/[\w./-]+\.py)(?::([\w.]+))?`:", re.MULTILINE)
PATH = re.compile(r"`((?:control_plane|relay|shared|vane|tests|docs)/[\w./-]*)`")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def defined_names(source: str) -> set[str]:
    """Every name a module defines at its top level or inside its classes and functions, dotted
    (``Class.method``, ``function.inner``), and its top-level assignments."""
    names: set[str] = set()

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + child.name)
                walk(child, prefix + child.name + ".")
            elif not prefix and isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))

    walk(ast.parse(source), "")
    return names


def long_functions(source: str) -> list[tuple[str, int]]:
    """``(dotted name, lines)`` of every function longer than ``MAX_FUNCTION_LINES``."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((prefix + child.name, lines))
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")

    walk(ast.parse(source), "")
    return found


def test_the_doc_names_functions_and_paths_at_all() -> None:
    """Guards the two tests below against a pattern that silently matches nothing."""
    text = _text()
    assert len(REFERENCE.findall(text)) > 40
    assert len(PATH.findall(text)) > 10


@pytest.mark.parametrize(
    ("path", "name"), sorted(set(REFERENCE.findall(DOC.read_text(encoding="utf-8"))))
)
def test_every_step_names_a_function_that_exists(path: str, name: str) -> None:
    file = ROOT / path
    assert file.is_file(), f"docs/architecture.md names {path}, which does not exist"
    assert name in defined_names(file.read_text(encoding="utf-8")), (
        f"docs/architecture.md names {path}:{name}, which {path} does not define"
    )


def test_every_path_named_exists() -> None:
    missing = [p for p in sorted(set(PATH.findall(_text()))) if not (ROOT / p).exists()]
    assert missing == []


def test_every_large_module_and_long_function_of_the_domains_says_why() -> None:
    text = _text()
    unexplained = []
    for file in sorted(DOMAIN.rglob("*.py")):
        path = file.relative_to(ROOT).as_posix()
        source = file.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES and f"- `{path}`:" not in text:
            unexplained.append(f"{path} ({lines} lines)")
        for name, length in long_functions(source):
            if f"- `{path}:{name}`:" not in text:
                unexplained.append(f"{path}:{name} ({length} lines)")
    assert unexplained == [], "say why in docs/architecture.md, or split: " + ", ".join(unexplained)


def test_every_module_and_function_explained_is_still_over_the_limit() -> None:
    """The list stays true the other way: a module or function split below the limit leaves it."""
    explained = EXPLAINED.findall(_text())
    assert explained, "the pattern of the list's lines matches nothing"
    within = []
    for path, name in explained:
        source = (ROOT / path).read_text(encoding="utf-8")
        if not name and len(source.splitlines()) <= MAX_MODULE_LINES:
            within.append(f"{path} ({len(source.splitlines())} lines)")
        if name and name not in dict(long_functions(source)):
            within.append(f"{path}:{name}")
    assert within == [], "no longer over the limit: drop from docs/architecture.md: " + ", ".join(
        within
    )


def test_the_rule_finds_what_it_measures() -> None:
    """``long_functions`` counts a method and a nested function, with their dotted names."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n    def m(self) -> None:\n{body}\n\ndef short() -> None:\n    pass\n"
    assert long_functions(source) == [("C.m", MAX_FUNCTION_LINES + 1)]
    assert {"C", "C.m", "short"} <= defined_names(source)
