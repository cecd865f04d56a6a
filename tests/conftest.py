"""Workspace-level fixtures: the release tool (tools/release.py) and throwaway copies of the repo."""

from __future__ import annotations

import datetime
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# What a release needs from the workspace (git's view of it: tracked and untracked, not ignored).
_COPIED = ["noxfile.py", "pyproject.toml", ".gitignore", "tools", "packages"]


@pytest.fixture(scope="session")
def release_tool() -> ModuleType:
    """tools/release.py imported as a module (it is workspace tooling, not a package)."""
    return _release_tool()


def _release_tool() -> ModuleType:
    name = "paravt_release_tool"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> str:
    """Run git in repo and return its stdout (raises on failure)."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _copy_workspace(dest: Path) -> Path:
    """Copy the working tree's release-relevant files to dest as a fresh one-commit git repo."""
    dest.mkdir(parents=True)
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard", *_COPIED)
    for rel in sorted(set(filter(None, listed.split("\0")))):
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for changelog in sorted(dest.glob("packages/*/CHANGELOG.md")):
        _give_unreleased_an_entry(changelog)
    _git(dest, "init", "--quiet", "--initial-branch", "main")
    _git(dest, "config", "user.name", "Release Test")
    _git(dest, "config", "user.email", "release-test@example.invalid")
    _git(dest, "config", "commit.gpgsign", "false")
    _git(dest, "config", "tag.gpgsign", "false")
    _git(dest, "add", "--all")
    _git(dest, "commit", "--quiet", "-m", "Workspace copy")
    return dest


def _give_unreleased_an_entry(changelog: Path) -> None:
    """Right after a real release every `## [Unreleased]` section is empty, and the tool rightly
    refuses to release from one; the copy gets an entry, so the release tests do not depend on
    where the real changelogs stand."""
    text = changelog.read_text(encoding="utf-8")
    head, sep, rest = text.partition("## [Unreleased]\n")
    if not sep:
        return
    body = rest.split("\n## ", 1)[0]
    if body.strip():
        return
    entry = "\n### Changed\n- An entry the release tests' workspace copy adds.\n"
    changelog.write_text(head + sep + entry + rest, encoding="utf-8")


def _mark_released(repo: Path, package: str, *, raise_dependents: bool = True) -> str:
    """In a workspace copy, the edits a release of `package` commits (the next patch version, its
    Unreleased entries moved under it), as if it had been released earlier; with
    `raise_dependents` every sibling's range then requires that version (`tested_range`), as the
    release procedure asks before a dependent is released. Amends the copy's one commit, so it
    stays "Workspace copy". Returns the version."""
    tool = _release_tool()
    pkg = tool.load_package(repo / "packages" / package, repo)
    new = Version(f"{pkg.version.major}.{pkg.version.minor}.{pkg.version.micro + 1}")
    pkg.pyproject.write_text(tool.bump_pyproject_version(pkg.pyproject.read_text(), new))
    today = datetime.date.today().isoformat()
    pkg.changelog.write_text(tool.release_changelog(pkg.changelog.read_text(), new, today))
    if raise_dependents:
        spec = tool.tested_range(package, new).removeprefix(package)
        pattern = re.compile(rf'"{re.escape(package)}(\[[^\]]*\])?[<>=!~,.\d\s]*"')
        for pyproject in (repo / "packages").glob("*/pyproject.toml"):
            if pyproject.parent.name != package:
                text = pyproject.read_text()
                pyproject.write_text(
                    pattern.sub(lambda m: f'"{package}{m.group(1) or ""}{spec}"', text)
                )
    _git(repo, "commit", "--quiet", "--all", "--amend", "-m", "Workspace copy")
    return str(new)


@pytest.fixture(scope="session")
def mark_released() -> Callable[..., str]:
    """mark_released(repo, package, raise_dependents=True) -> version (see `_mark_released`)."""
    return _mark_released


def _subprocess_env() -> dict[str, str]:
    """os.environ without twine credentials or the calling venv, for release subprocesses."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "TWINE_API_KEY", "TWINE_USERNAME", "TWINE_PASSWORD")
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="session")
def git() -> Callable[..., str]:
    """git(repo, *args) -> stdout."""
    return _git


@pytest.fixture(scope="session")
def copy_workspace() -> Callable[[Path], Path]:
    """copy_workspace(dest) -> dest: the working tree's packages, tools and noxfile as a new repo."""
    return _copy_workspace


@pytest.fixture(scope="session")
def subprocess_env() -> Callable[[], dict[str, str]]:
    """subprocess_env() -> os.environ without twine credentials or the calling venv."""
    return _subprocess_env


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A clean git repository holding a copy of the workspace (never the real repo)."""
    return _copy_workspace(tmp_path / "repo")


@pytest.fixture(scope="session")
def run_tool() -> Callable[..., subprocess.CompletedProcess]:
    """Run `python tools/release.py --root <repo> <args>` (the repo copy's own tool)."""

    def run(repo: Path, *args: str, env: dict[str, str] | None = None):
        return subprocess.run(
            [sys.executable, str(repo / "tools" / "release.py"), "--root", str(repo), *args],
            capture_output=True,
            text=True,
            env=_subprocess_env() if env is None else env,
            timeout=600,
        )

    return run
