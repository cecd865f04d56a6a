"""Which pre-registration a run's verdicts were judged under, read from git.

A verdict is pre-registered when the rules that judge it, their words and the settings of what is
trained were all committed before the run. Editing any of them (a rule's margin, its wording in
the doc, a task's settings, a recipe the miniature loads) changes what the verdict means, so the
tables print the last commit that touched any of these files and name each one that has
uncommitted changes. Read from the checkout the package runs from; an installed copy (no git
checkout) says so instead of a hash.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# Paths from the repository root: the rules, their words, the miniature's tasks and arms, and the
# recipes it loads.
REGISTERED = (
    "packages/paravt-eval/src/paravt/eval/reproduce/rules.py",
    "docs/reproduce_rules.md",
    "packages/paravt-train/src/paravt/train/miniature.py",
    "packages/paravt-train/src/paravt/train/recipes/tiny_sft.yaml",
    "packages/paravt-train/src/paravt/train/recipes/tiny_paragrpo.yaml",
    "packages/paravt-train/src/paravt/train/recipes/tiny_vanilla_grpo.yaml",
)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def registration(root: Path | None = None) -> str | None:
    """'<hash> <date>' of the last commit that changed any `REGISTERED` file, with every such
    file that has uncommitted changes named after it; None outside a git checkout."""
    if root is None:
        top = _git(Path(__file__).parent, "rev-parse", "--show-toplevel")
        if top is None:
            return None
        root = Path(top)
    present = [p for p in REGISTERED if (root / p).is_file()]
    if not present:
        return None
    commit = _git(root, "log", "-1", "--format=%h %ad", "--date=iso", "--", *present)
    if not commit:
        return None
    dirty = _git(root, "diff", "--name-only", "HEAD", "--", *present) or ""  # staged or not
    edited = sorted(line for line in dirty.splitlines() if line)
    if edited:
        commit += (
            f" (with uncommitted changes to {', '.join(edited)}: these verdicts are not "
            "pre-registered)"
        )
    return commit
