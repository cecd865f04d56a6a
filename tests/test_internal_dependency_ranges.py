"""Every package's declared ranges for its siblings admit the siblings' versions in the tree.

So a release of one package never silently breaks another: `pip install paravt-rewards` must resolve
against the paravt-core that this tree ships. The check itself lives in tools/release.py (the
release runs it too, with the planned version); it parses each pyproject with tomllib/tomli and
each requirement with packaging.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _copy_pyprojects(dest: Path) -> Path:
    """Copy only packages/*/pyproject.toml (all the range check reads) to dest."""
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        target = dest / "packages" / pyproject.parent.name / "pyproject.toml"
        target.parent.mkdir(parents=True)
        shutil.copy2(pyproject, target)
    return dest


def _set_core_requirement(root: Path, package: str, requirement: str) -> None:
    """Replace `package`'s "paravt-core..." dependency string with requirement."""
    path = root / "packages" / package / "pyproject.toml"
    text, count = re.subn(
        r'"paravt-core(\[[^\]]*\])?[<>=!~,.\d\s]*"', f'"{requirement}"', path.read_text()
    )
    assert count == 1, f"{path} should declare paravt-core exactly once"
    path.write_text(text)


def test_every_internal_range_admits_the_siblings_versions_in_the_tree(release_tool):
    assert release_tool.check_sibling_ranges(ROOT) == []


def test_every_package_that_needs_core_declares_a_range_for_it(release_tool):
    packages = release_tool.discover_packages(ROOT)
    for name, pkg in packages.items():
        if name == "paravt-core":
            continue
        core = [r for r in pkg.dependencies if r.name == "paravt-core"]
        assert len(core) == 1, f"{name} should depend on paravt-core"
        assert core[0].specifier.contains(packages["paravt-core"].version)


def test_a_range_made_incompatible_is_reported_with_the_file_and_the_fix(tmp_path, release_tool):
    root = _copy_pyprojects(tmp_path)
    assert release_tool.check_sibling_ranges(root) == []  # the copy is as sound as the tree
    core = release_tool.discover_packages(root)["paravt-core"].version
    excluding = f"paravt-core>{core},<{core.major + 1}"
    _set_core_requirement(root, "paravt-rewards", excluding)

    problems = release_tool.check_sibling_ranges(root)

    assert len(problems) == 1
    assert "packages/paravt-rewards/pyproject.toml [dependencies]" in problems[0]
    assert f"excludes paravt-core {core}" in problems[0]
    assert repr(release_tool.compatible_range("paravt-core", core)) in problems[0]


def test_a_range_without_upper_bound_is_reported(tmp_path, release_tool):
    root = _copy_pyprojects(tmp_path)
    _set_core_requirement(root, "paravt-rewards", "paravt-core>=0.1")

    problems = release_tool.check_sibling_ranges(root)

    assert len(problems) == 1
    assert "no upper bound" in problems[0]


def test_a_planned_core_release_outside_the_siblings_ranges_names_each_dependent(release_tool):
    core = release_tool.discover_packages(ROOT)["paravt-core"].version
    breaking = f"{core.major}.{core.minor + 1}.0" if core.major == 0 else f"{core.major + 1}.0.0"

    problems = release_tool.check_sibling_ranges(ROOT, {"paravt-core": breaking})

    dependents = {"paravt-tools", "paravt-rewards", "paravt-train", "paravt-eval"}
    assert {p.split(" requires ")[0].split(": ")[-1] for p in problems} == dependents


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.1.0", "paravt-core>=0.1,<0.2"),
        ("0.3.7", "paravt-core>=0.3,<0.4"),
        ("1.2.0", "paravt-core>=1.2,<2"),
    ],
)
def test_the_suggested_range_is_the_compatible_one(release_tool, version, expected):
    from packaging.version import Version

    assert release_tool.compatible_range("paravt-core", Version(version)) == expected
