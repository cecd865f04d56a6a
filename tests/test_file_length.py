"""Files of package code are short enough to read at once: 400 lines at most, or a stated
reason (issue 46). A module over `LIMIT` lines says why it is one file in its docstring ("One file because
..."); a new long file without one fails here, naming it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400


def test_every_long_module_states_why_it_is_one_file() -> None:
    unexplained = []
    for path in sorted(ROOT.glob("packages/*/src/paravt/**/*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "One file because" not in doc:
            unexplained.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not unexplained, (
        f"modules over {LIMIT} lines without a 'One file because ...' reason in their docstring "
        "(split them by responsibility, or state why they are one file):\n" + "\n".join(unexplained)
    )
