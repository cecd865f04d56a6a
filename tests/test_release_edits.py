"""The two edits a release makes: the [project] version line and the changelog's Unreleased section."""

from __future__ import annotations

import pytest

CHANGELOG = """# Changelog: paravt-x

Intro text.

## [Unreleased]

### Added
- New thing.

### Fixed
- A bug.

## [0.1.0] - 2025-01-02

### Added
- First.

[Unreleased]: https://example.invalid/compare/paravt-x-v0.1.0...HEAD
"""

PYPROJECT = """[build-system]
requires = ["hatchling>=1.24"]

[project]
name = "paravt-x"
version = "0.1.0"
dependencies = [
  "paravt-core>=0.1,<0.2",
]

[tool.other]
version = "9.9.9"
"""


def test_unreleased_entries_become_a_dated_section_under_a_fresh_unreleased(release_tool):
    out = release_tool.release_changelog(CHANGELOG, "0.2.0", "2025-03-04")
    assert out == CHANGELOG.replace(
        "## [Unreleased]\n\n### Added\n- New thing.",
        "## [Unreleased]\n\n## [0.2.0] - 2025-03-04\n\n### Added\n- New thing.",
    )
    assert release_tool.unreleased_entries(out) == []


@pytest.mark.parametrize(
    "body",
    ["", "\n\n", "\n### Added\n\n### Changed\n\n", "\n<!-- add entries here -->\n"],
    ids=["nothing", "blank lines", "headings only", "a comment only"],
)
def test_an_unreleased_section_without_entries_is_refused(release_tool, body):
    text = f"# Changelog\n\n## [Unreleased]\n{body}\n## [0.1.0] - 2025-01-02\n- First.\n"
    with pytest.raises(release_tool.ReleaseError, match="section is empty"):
        release_tool.release_changelog(text, "0.2.0", "2025-03-04", "packages/x/CHANGELOG.md")


def test_the_last_unreleased_section_stops_at_link_definitions(release_tool):
    text = "# Changelog\n\n## [Unreleased]\n\n[Unreleased]: https://example.invalid/HEAD\n"
    assert release_tool.unreleased_entries(text) == []


def test_a_changelog_without_unreleased_or_with_the_version_already_is_refused(release_tool):
    with pytest.raises(release_tool.ReleaseError, match=r"no '## \[Unreleased\]' section"):
        release_tool.release_changelog("# Changelog\n\n## [0.1.0]\n- x\n", "0.2.0", "2025-03-04")
    with pytest.raises(release_tool.ReleaseError, match=r"already has a '## \[0.1.0\]' section"):
        release_tool.release_changelog(CHANGELOG, "0.1.0", "2025-03-04")


def test_the_bump_changes_only_the_project_version_line(release_tool):
    out = release_tool.bump_pyproject_version(PYPROJECT, "0.2.0")
    assert out == PYPROJECT.replace('version = "0.1.0"', 'version = "0.2.0"')
    assert 'version = "9.9.9"' in out


def test_a_pyproject_with_two_version_lines_is_refused(release_tool):
    twice = PYPROJECT.replace('name = "paravt-x"\n', 'name = "paravt-x"\nversion = "0.1.0"\n')
    with pytest.raises(release_tool.ReleaseError, match="exactly one"):
        release_tool.bump_pyproject_version(twice, "0.2.0", "x/pyproject.toml")


def test_a_non_canonical_or_invalid_version_is_refused_with_the_canonical_form(release_tool):
    with pytest.raises(release_tool.ReleaseError, match=r"canonical form, 0\.2\.0rc1"):
        release_tool._parse_new_version("0.2.0-rc1")
    with pytest.raises(release_tool.ReleaseError, match="not a PEP 440 version"):
        release_tool._parse_new_version("two")
