"""`nox -s release` / tools/release.py, driven in throwaway copies of the repository.

The happy path goes through nox itself (`nox -s release -- paravt-rewards <next patch>
--no-isolation`) with its own venv; the refusals call tools/release.py directly, which is what the
session runs. Builds use `--no-isolation` (hatchling from the session's venv) to skip downloading a
build environment per build; the fresh-venv install check is the real one (pydantic from the index).
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PACKAGE = "paravt-rewards"


def _version(repo: Path, package: str) -> Version:
    data = tomllib.loads((repo / "packages" / package / "pyproject.toml").read_text())
    return Version(data["project"]["version"])


def _next_patch(version: Version) -> str:
    return f"{version.major}.{version.minor}.{version.micro + 1}"


def _files_at_head(repo: Path, git) -> dict[str, str]:
    tracked = git(repo, "ls-files").split()
    return {path: (repo / path).read_text(encoding="utf-8") for path in tracked}


@pytest.fixture(scope="module")
def released(
    tmp_path_factory: pytest.TempPathFactory, copy_workspace, git, subprocess_env, mark_released
):
    """A repo copy before and after `nox -s release -- paravt-rewards <next patch>`, its sibling
    paravt-core released before it (and required at that version), as the procedure asks."""
    base = tmp_path_factory.mktemp("release")
    repo = copy_workspace(base / "repo")
    mark_released(repo, "paravt-core")
    old = _version(repo, PACKAGE)
    new = _next_patch(old)
    before = _files_at_head(repo, git)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "--noxfile",
            str(repo / "noxfile.py"),
            "--envdir",
            str(base / "nox-envs"),
            "--session",
            "release",
            "--",
            PACKAGE,
            new,
            "--no-isolation",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "repo": repo,
        "old": old,
        "new": new,
        "before": before,
        "log": proc.stdout + proc.stderr,
    }


@pytest.mark.slow
def test_release_bumps_only_the_released_packages_version(released, git):
    repo, new = released["repo"], released["new"]
    assert str(_version(repo, PACKAGE)) == new
    for pkg in ("paravt-core", "paravt-tools", "paravt-train", "paravt-eval"):
        path = f"packages/{pkg}/pyproject.toml"
        assert (repo / path).read_text() == released["before"][path]
    changed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(changed) == [
        f"packages/{PACKAGE}/CHANGELOG.md",
        f"packages/{PACKAGE}/pyproject.toml",
    ]


@pytest.mark.slow
def test_release_moves_unreleased_entries_under_the_new_version_dated_today(released):
    repo, new = released["repo"], released["new"]
    text = (repo / "packages" / PACKAGE / "CHANGELOG.md").read_text()
    today = datetime.date.today().isoformat()
    assert f"## [Unreleased]\n\n## [{new}] - {today}\n\n" in text
    old_text = released["before"][f"packages/{PACKAGE}/CHANGELOG.md"]
    old_body = old_text.split("## [Unreleased]\n", 1)[1].split("\n## ", 1)[0].strip()
    new_body = text.split(f"## [{new}] - {today}\n", 1)[1].split("\n## ", 1)[0].strip()
    assert new_body == old_body and old_body
    assert text.count("## [Unreleased]") == 1


@pytest.mark.slow
def test_release_commits_and_tags_package_v_version_on_a_clean_tree(released, git):
    repo, new = released["repo"], released["new"]
    assert git(repo, "log", "-1", "--format=%s").strip() == f"Release {PACKAGE} {new}"
    tag = f"{PACKAGE}-v{new}"
    assert git(repo, "tag", "--list").split() == [tag]
    assert git(repo, "rev-list", "-n", "1", tag) == git(repo, "rev-parse", "HEAD")
    assert git(repo, "cat-file", "-t", tag).strip() == "tag"  # annotated
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.slow
def test_release_builds_that_package_only_with_the_new_version_in_the_wheel_metadata(released):
    repo, new = released["repo"], released["new"]
    names = sorted(p.name for p in (repo / "dist").iterdir())
    assert names == [f"paravt_rewards-{new}-py3-none-any.whl", f"paravt_rewards-{new}.tar.gz"]
    with zipfile.ZipFile(repo / "dist" / names[0]) as zf:
        metadata = zf.read(f"paravt_rewards-{new}.dist-info/METADATA").decode()
    assert "Name: paravt-rewards\n" in metadata
    assert f"\nVersion: {new}\n" in metadata


@pytest.mark.slow
def test_release_checks_the_wheel_in_a_fresh_venv_with_sibling_wheels_from_the_tree(released):
    log = released["log"]
    core = _version(released["repo"], "paravt-core")
    assert "twine check --strict" in log
    assert f"building the sibling wheel paravt-core {core} from the tree" in log
    assert f"paravt_core-{core}-py3-none-any.whl into a fresh venv" in log
    assert "importing paravt.rewards from the fresh venv" in log


# --- refusals: each leaves the repository exactly as it was ----------------------------------


def _assert_refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "release: error:" in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, proc.stderr


def _assert_untouched(repo: Path, git) -> None:
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert git(repo, "log", "--format=%s") == "Workspace copy\n"
    assert git(repo, "tag", "--list") == ""


def test_release_refuses_a_dirty_tree(repo, run_tool, git):
    (repo / "packages" / PACKAGE / "notes.txt").write_text("uncommitted work\n")
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)))
    _assert_refused(proc, "working tree is dirty", "notes.txt", "commit or remove")
    _assert_untouched(repo, git)


def test_release_refuses_a_modified_tracked_file(repo, run_tool):
    readme = repo / "packages" / "paravt-core" / "README.md"
    readme.write_text(readme.read_text() + "\nedited\n")
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)))
    _assert_refused(proc, "working tree is dirty", "packages/paravt-core/README.md")


@pytest.mark.parametrize("how", ["same", "lower"])
def test_release_refuses_a_version_that_does_not_increase(repo, run_tool, how, git):
    current = _version(repo, PACKAGE)
    version = str(current) if how == "same" else "0.0.1"
    proc = run_tool(repo, "release", PACKAGE, version)
    _assert_refused(
        proc,
        f"version {version} does not increase the current {current}",
        f"packages/{PACKAGE}/pyproject.toml",
        "pass a higher version",
    )
    _assert_untouched(repo, git)


def test_release_refuses_an_empty_unreleased_section(repo, run_tool, git):
    changelog = repo / "packages" / PACKAGE / "CHANGELOG.md"
    head = changelog.read_text().split("## [Unreleased]", 1)[0]
    changelog.write_text(head + "## [Unreleased]\n\n### Added\n\n## [0.0.1] - 2025-01-01\n")
    git(repo, "commit", "--quiet", "--all", "--amend", "-m", "Workspace copy")
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)))
    _assert_refused(
        proc,
        f"packages/{PACKAGE}/CHANGELOG.md",
        "'## [Unreleased]' section is empty",
        "list this release's changes under it",
    )
    _assert_untouched(repo, git)


def test_release_refuses_a_version_that_a_siblings_range_excludes(repo, run_tool, git):
    core = _version(repo, "paravt-core")
    breaking = f"{core.major}.{core.minor + 1}.0" if core.major == 0 else f"{core.major + 1}.0.0"
    proc = run_tool(repo, "release", "paravt-core", breaking)
    _assert_refused(
        proc,
        f"releasing paravt-core {breaking} would leave internal ranges broken",
        f"packages/{PACKAGE}/pyproject.toml",
        f"which excludes paravt-core {breaking}",
    )
    _assert_untouched(repo, git)


def test_release_refuses_a_package_whose_sibling_has_unreleased_changes(repo, run_tool, git):
    # the copy's paravt-core has entries under [Unreleased]: a paravt-rewards built against it
    # would meet the last released paravt-core on a user's machine
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)))
    _assert_refused(
        proc,
        f"releasing {PACKAGE} {_next_patch(_version(repo, PACKAGE))} would ship code",
        f"packages/{PACKAGE}/pyproject.toml [dependencies]",
        "changes under [Unreleased] (packages/paravt-core/CHANGELOG.md)",
        "release paravt-core first",
    )
    _assert_untouched(repo, git)


def test_release_refuses_a_range_admitting_a_sibling_release_older_than_the_trees(
    repo, run_tool, git, mark_released
):
    old_core = _version(repo, "paravt-core")
    new_core = mark_released(repo, "paravt-core", raise_dependents=False)
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)))
    upper = f"0.{old_core.minor + 1}" if old_core.major == 0 else f"{old_core.major + 1}"
    _assert_refused(
        proc,
        f"admits paravt-core {old_core} (released, older than the {new_core} it is tested with",
        f"write 'paravt-core>={new_core},<{upper}'",
    )
    _assert_untouched(repo, git)


def test_release_refuses_an_existing_tag(repo, run_tool, git):
    new = _next_patch(_version(repo, PACKAGE))
    git(repo, "tag", f"{PACKAGE}-v{new}")
    proc = run_tool(repo, "release", PACKAGE, new)
    _assert_refused(proc, f"tag {PACKAGE}-v{new} already exists")


def test_release_refuses_an_unknown_package_and_names_the_known_ones(repo, run_tool):
    proc = run_tool(repo, "release", "paravt-nope", "9.9.9")
    _assert_refused(proc, "unknown package 'paravt-nope'", "paravt-core", "paravt-rewards")


def test_release_with_publish_refuses_without_credentials_before_touching_anything(
    repo, run_tool, git
):
    proc = run_tool(repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)), "--publish")
    _assert_refused(proc, "publishing needs credentials", "TWINE_API_KEY", "TWINE_USERNAME")
    _assert_untouched(repo, git)
    assert not (repo / "dist").exists()


def test_publish_refuses_without_credentials(repo, run_tool, subprocess_env):
    env = subprocess_env()
    env["TWINE_USERNAME"] = "someone"  # a username alone is not enough
    proc = run_tool(repo, "publish", PACKAGE, env=env)
    _assert_refused(proc, "publishing needs credentials", "nothing was uploaded")


def test_publish_refuses_a_version_that_was_never_released(repo, run_tool, subprocess_env):
    env = {**subprocess_env(), "TWINE_API_KEY": "pypi-not-a-real-token"}
    proc = run_tool(repo, "publish", PACKAGE, env=env)
    _assert_refused(proc, f"no tag {PACKAGE}-v{_version(repo, PACKAGE)}", "nox -s release")


def test_an_api_key_becomes_a_token_login_for_twine(release_tool):
    creds = release_tool.twine_credentials({"TWINE_API_KEY": "pypi-abc"})
    assert creds == {"TWINE_USERNAME": "__token__", "TWINE_PASSWORD": "pypi-abc"}
    pair = release_tool.twine_credentials({"TWINE_USERNAME": "u", "TWINE_PASSWORD": "p"})
    assert pair == {"TWINE_USERNAME": "u", "TWINE_PASSWORD": "p"}


@pytest.mark.slow
def test_a_failing_check_undoes_the_bump_and_runs_the_smallest_example(
    repo, run_tool, git, mark_released
):
    mark_released(repo, "paravt-core")
    examples = repo / "packages" / PACKAGE / "examples"
    examples.mkdir(exist_ok=True)
    # The smallest example fails on purpose, so the release stops after install + import.
    (examples / "aaa_tiny.py").write_text("raise SystemExit('tiny example ran')\n")
    (examples / "zzz_bigger_example.py").write_text("print('a longer example that passes')\n" * 20)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--amend", "-m", "Workspace copy")
    before = _files_at_head(repo, git)
    proc = run_tool(
        repo, "release", PACKAGE, _next_patch(_version(repo, PACKAGE)), "--no-isolation"
    )
    _assert_refused(proc, "example aaa_tiny.py failed", "tiny example ran")
    assert "importing paravt.rewards from the fresh venv" in proc.stdout
    assert "edits were undone" in proc.stdout
    assert _files_at_head(repo, git) == before
    _assert_untouched(repo, git)
