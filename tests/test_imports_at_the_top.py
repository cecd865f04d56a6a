"""Imports of `paravt.*` go at the top of a file (docs/ARCHITECTURE.md, "The layering rule").

Inside a function only for an optional heavy dependency or a CLI subcommand, each with its reason:
a `# lazy: <reason>` comment right above the import (or above the block of imports it starts).
A new function-level import without one fails here, naming the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(ROOT.glob("packages/*/src/paravt/**/*.py"))


def function_level_paravt_imports(path: Path) -> list[int]:
    """Line numbers of `from paravt... import` / `import paravt...` inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom):
                names = [inner.module or ""]
            elif isinstance(inner, ast.Import):
                names = [a.name for a in inner.names]
            else:
                continue
            if any(name.startswith("paravt") for name in names):
                found.add(inner.lineno)
    return sorted(found)


def reason_of(lines: list[str], lineno: int) -> str | None:
    """The `# lazy:` comment governing the import on `lineno` (1-based): the nearest comment line
    above it with only other imports (and their continuation lines) in between."""
    k = lineno - 2
    while k >= 0:
        text = lines[k].strip()
        if text.startswith("#"):
            return text if text.startswith("# lazy:") and len(text) > len("# lazy:") + 8 else None
        if text.startswith(("from ", "import ")) or text.endswith((",", "(")) or text == ")":
            k -= 1
            continue
        return None
    return None


def test_the_scan_finds_function_level_imports(tmp_path: Path) -> None:
    """The guard can fail: an import inside a function, without a reason, is found and has none."""
    bad = tmp_path / "m.py"
    bad.write_text(
        "def f():\n    x = 1\n    from paravt.core.protocol import Frame\n"
        "    # lazy: the optional extra paravt-core[hf] (torch)\n"
        "    from paravt.core.engines.hf import HFEngine\n"
        "    from paravt.core.testing import (\n        build_tokenizer,\n    )\n"
    )
    lines = bad.read_text().splitlines()
    assert function_level_paravt_imports(bad) == [3, 5, 6]
    assert reason_of(lines, 3) is None
    assert reason_of(lines, 5) == reason_of(lines, 6) is not None


def test_every_function_level_paravt_import_states_why() -> None:
    unexplained = []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno in function_level_paravt_imports(path):
            if reason_of(lines, lineno) is None:
                unexplained.append(
                    f"{path.relative_to(ROOT)}:{lineno}: {lines[lineno - 1].strip()}"
                )
    assert not unexplained, (
        "imports of paravt.* inside functions without a `# lazy: <reason>` comment above them "
        "(move them to the top of the file, or state the optional dependency they wait for):\n"
        + "\n".join(unexplained)
    )
