"""Find where flag keys are used in a source tree, as LaunchDarkly's ld-find-code-refs does.

A key matches as a whole word: the characters around it must not continue a key
(``[A-Za-z0-9_-]``, or a ``.`` joined to more key characters), so ``new-checkout`` is not found
inside ``new-checkout-v2`` nor ``checkout`` inside ``checkout.v2``. Vendored and generated folders,
binary files (a NUL byte in the first 8 KiB) and files over 1 MiB are skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "vendor",
        "third_party",
        "bower_components",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "dist",
        "build",
        "target",
        ".next",
        ".nuxt",
        ".idea",
        ".vscode",
        ".gradle",
        "Pods",
        "coverage",
        ".terraform",
    }
)
SOURCE_SUFFIXES = frozenset(
    {
        ".py",
        ".pyi",
        ".js",
        ".jsx",
        ".mjs",
        ".cjs",
        ".ts",
        ".tsx",
        ".vue",
        ".svelte",
        ".go",
        ".rb",
        ".erb",
        ".java",
        ".kt",
        ".kts",
        ".scala",
        ".groovy",
        ".cs",
        ".fs",
        ".vb",
        ".php",
        ".swift",
        ".m",
        ".mm",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".cxx",
        ".hpp",
        ".dart",
        ".ex",
        ".exs",
        ".erl",
        ".hrl",
        ".clj",
        ".cljs",
        ".lua",
        ".pl",
        ".pm",
        ".r",
        ".jl",
        ".hs",
        ".elm",
        ".ml",
        ".nim",
        ".cr",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".html",
        ".htm",
        ".css",
        ".scss",
        ".yml",
        ".yaml",
        ".json",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".properties",
        ".env",
        ".tf",
        ".sql",
        ".md",
        ".txt",
        ".xml",
        ".gradle",
        ".liquid",
        ".twig",
        ".hbs",
        ".mustache",
    }
)
MAX_FILE_BYTES = 1024 * 1024
MAX_SNIPPET = 300
_KEY_CHAR = r"A-Za-z0-9_\-"


@dataclass(frozen=True, slots=True)
class CodeRef:
    flag_key: str
    path: str  # relative to the scanned root, with '/' separators
    line: int  # 1-based
    snippet: str


def key_pattern(keys: Iterable[str]) -> re.Pattern[str] | None:
    ordered = sorted(set(keys), key=lambda k: (-len(k), k))
    if not ordered:
        return None
    alternatives = "|".join(re.escape(k) for k in ordered)
    return re.compile(
        rf"(?<![{_KEY_CHAR}])(?<![{_KEY_CHAR}]\.)({alternatives})(?![{_KEY_CHAR}])(?!\.[{_KEY_CHAR}])"
    )


def source_files(root: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(filenames):
            path = Path(directory, name)
            if path.suffix.lower() in SOURCE_SUFFIXES and not path.is_symlink():
                yield path


def _read_text(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def scan_text(text: str, pattern: re.Pattern[str], relative: str) -> Iterator[CodeRef]:
    for number, line in enumerate(text.splitlines(), start=1):
        seen: set[str] = set()
        for match in pattern.finditer(line):
            key = match.group(1)
            if key not in seen:
                seen.add(key)
                yield CodeRef(key, relative, number, line.strip()[:MAX_SNIPPET])


def scan_tree(root: Path, flag_keys: Iterable[str]) -> list[CodeRef]:
    """Every reference to any of ``flag_keys`` under ``root``, in path and line order."""
    pattern = key_pattern(flag_keys)
    if pattern is None:
        return []
    refs: list[CodeRef] = []
    for path in source_files(root):
        text = _read_text(path)
        if text is not None:
            refs.extend(scan_text(text, pattern, path.relative_to(root).as_posix()))
    return refs
