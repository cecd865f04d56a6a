"""Per-package releases for the ParaVT monorepo; `nox -s release` and `nox -s publish` call this.

    python tools/release.py release <package> <version> [--publish] [--no-isolation]
    python tools/release.py publish <package>
    python tools/release.py check-ranges

`release` refuses a dirty tree, a version that does not increase, an empty `## [Unreleased]`
changelog section, an existing tag, a bump that a sibling's declared range would not admit, and a
package whose siblings' code in the tree is not what its users would install (a sibling with
unreleased changes, or a range admitting a sibling release older than the tree's).
Then it bumps `version` in packages/<package>/pyproject.toml, moves Unreleased to
`## [<version>] - <today>` under a fresh empty Unreleased, builds that package's sdist and wheel
only, checks them (wheel metadata, `twine check --strict`, and a fresh venv that installs the wheel
with its internal dependencies taken from wheels freshly built from this tree, external ones from
the package index, then imports it and runs its smallest example), copies them into dist/, commits
"Release <package> <version>" and creates the annotated tag `<package>-v<version>`. Any failure
before the commit undoes the version and changelog edits.

`publish` uploads dist/'s files of the package's current (tagged) version with twine, with
credentials from the environment only (TWINE_API_KEY, or TWINE_USERNAME + TWINE_PASSWORD).

Needs `packaging`, `build`, `twine` (and `tomli` on Python 3.10) in the running interpreter, plus
`git` on PATH. Workspace tooling: not part of any published package.
"""

from __future__ import annotations

import argparse
import datetime
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
Log = Callable[[str], None]
# Environment variables that would make the fresh venv see something other than the wheels.
_LEAKY_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")


class ReleaseError(Exception):
    """A release step refused or failed; the message names the input and the fix."""


@dataclass(frozen=True)
class Package:
    """One distribution under packages/: its canonical name, static version and requirements."""

    name: str
    version: Version
    path: Path
    dependencies: tuple[Requirement, ...]
    optional_dependencies: Mapping[str, tuple[Requirement, ...]]

    @property
    def pyproject(self) -> Path:
        return self.path / "pyproject.toml"

    @property
    def changelog(self) -> Path:
        return self.path / "CHANGELOG.md"

    @property
    def module(self) -> str:
        """Import name: paravt-rewards -> paravt.rewards (PEP 420 namespace `paravt`)."""
        return self.name.replace("-", ".", 1).replace("-", "_")

    @property
    def file_prefix(self) -> str:
        """How sdist and wheel file names start: paravt-rewards -> paravt_rewards."""
        return self.name.replace("-", "_")

    def all_requirements(self) -> Iterable[tuple[str, Requirement]]:
        """(where, requirement) for dependencies and every extra's dependencies."""
        for req in self.dependencies:
            yield "dependencies", req
        for extra, reqs in self.optional_dependencies.items():
            for req in reqs:
                yield f"optional-dependencies.{extra}", req


def _log(msg: str) -> None:
    print(f"release: {msg}", flush=True)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _parse_requirements(items: Iterable[str], where: str) -> tuple[Requirement, ...]:
    reqs = []
    for item in items:
        try:
            reqs.append(Requirement(item))
        except Exception as exc:
            raise ReleaseError(f"{where}: cannot parse requirement {item!r}: {exc}") from exc
    return tuple(reqs)


def load_package(path: Path, root: Path = ROOT) -> Package:
    """Read packages/<dist>/pyproject.toml into a Package (static version required)."""
    pyproject = path / "pyproject.toml"
    where = _rel(pyproject, root)
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ReleaseError(f"{where}: cannot read it as TOML: {exc}") from exc
    project = data.get("project", {})
    if "version" in project.get("dynamic", []) or "version" not in project:
        raise ReleaseError(
            f'{where}: the version must be a static `version = "X.Y.Z"` in [project] '
            "(the only place a package's version lives)"
        )
    try:
        version = Version(project["version"])
    except InvalidVersion as exc:
        raise ReleaseError(f"{where}: version {project['version']!r} is not PEP 440") from exc
    optional = {
        extra: _parse_requirements(items, f"{where} [project.optional-dependencies.{extra}]")
        for extra, items in project.get("optional-dependencies", {}).items()
    }
    return Package(
        name=canonicalize_name(project["name"]),
        version=version,
        path=path,
        dependencies=_parse_requirements(project.get("dependencies", []), where),
        optional_dependencies=optional,
    )


def discover_packages(root: Path = ROOT) -> dict[str, Package]:
    """Every packages/*/pyproject.toml under root, keyed by canonical distribution name."""
    found = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        pkg = load_package(pyproject.parent, root)
        found[pkg.name] = pkg
    if not found:
        raise ReleaseError(f"{root}: no packages/*/pyproject.toml found; pass the workspace root")
    return found


def compatible_range(name: str, version: Version) -> str:
    """The range a sibling should declare for `version`: >=0.3,<0.4 for 0.x, >=1.2,<2 after 1.0."""
    major, minor = version.major, version.minor
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"{name}>={major}.{minor},<{upper}"


def _has_upper_bound(req: Requirement) -> bool:
    return any(spec.operator in ("<", "<=", "==", "~=", "===") for spec in req.specifier)


def check_sibling_ranges(
    root: Path = ROOT, versions: Mapping[str, Version | str] | None = None
) -> list[str]:
    """Problems with the internal dependency ranges of every package under root, [] when sound.

    Each requirement naming a sibling package must have an upper bound and must admit the
    sibling's version in the tree (or the version given for it in `versions`, e.g. a planned
    release). Each problem names the file, the requirement and the range to write instead.
    """
    packages = discover_packages(root)
    current = {name: pkg.version for name, pkg in packages.items()}
    for name, version in (versions or {}).items():
        current[canonicalize_name(name)] = Version(str(version))
    problems = []
    for pkg in packages.values():
        where = _rel(pkg.pyproject, root)
        for section, req in pkg.all_requirements():
            sibling = canonicalize_name(req.name)
            if sibling not in current or sibling == pkg.name:
                continue
            want = compatible_range(sibling, current[sibling])
            if not req.specifier.contains(current[sibling], prereleases=True):
                problems.append(
                    f"{where} [{section}]: {pkg.name} requires {req}, which excludes "
                    f"{sibling} {current[sibling]} in the tree; write {want!r} (and release "
                    f"{pkg.name} after {sibling})"
                )
            elif not _has_upper_bound(req):
                problems.append(
                    f"{where} [{section}]: {pkg.name} requires {req} with no upper bound, so a "
                    f"future breaking {sibling} would be admitted; write {want!r}"
                )
    return problems


def released_versions(pkg: Package) -> list[Version]:
    """The versions `pkg`'s CHANGELOG.md has a section for (`## [0.2.0] - 2026-11-26`), newest
    first: the releases a user can install from the index."""
    try:
        text = pkg.changelog.read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for heading in re.findall(r"^## \[([^\]]+)\]", text, re.M):
        try:
            found.append(Version(heading))
        except InvalidVersion:
            continue  # [Unreleased]
    return sorted(found, reverse=True)


def tested_range(name: str, version: Version) -> str:
    """The range a package should declare for the sibling `version` it is built and tested with:
    that version up to the next breaking one (>=0.3.1,<0.4 for 0.3.1, >=1.2.0,<2 for 1.2.0)."""
    upper = f"0.{version.minor + 1}" if version.major == 0 else f"{version.major + 1}"
    return f"{name}>={version},<{upper}"


def unreleased_sibling_problems(
    pkg: Package, packages: Mapping[str, Package], root: Path = ROOT
) -> list[str]:
    """Why `pkg` may not be released yet against its siblings, [] when it may.

    A release is built and checked against its siblings as they stand in this tree, but a user's
    `pip install` takes them from the index, anywhere in the declared range. So for each
    requirement naming a sibling: the sibling must have no entries under `## [Unreleased]` (else
    its last release lacks code this one was tested with: a missing name fails loudly, a changed
    rule silently), and the range must admit no released version of it older than the one in the
    tree. Each problem names the file and the fix.
    """
    where = _rel(pkg.pyproject, root)
    problems = []
    for section, req in pkg.all_requirements():
        sibling = packages.get(canonicalize_name(req.name))
        if sibling is None or sibling.name == pkg.name:
            continue
        changelog = _rel(sibling.changelog, root)
        try:
            pending = unreleased_entries(sibling.changelog.read_text(encoding="utf-8"), changelog)
        except (OSError, ReleaseError):  # no changelog or no Unreleased section: nothing pending
            pending = []
        if pending:
            problems.append(
                f"{where} [{section}]: {pkg.name} is built and tested against {sibling.name} as "
                f"it stands in this tree, which has changes under [Unreleased] ({changelog}), "
                f"but `pip install` would take the last release of {sibling.name}, without "
                f"them; release {sibling.name} first (nox -s release -- {sibling.name} "
                f"<version>), then require that version here (like "
                f"{tested_range(sibling.name, sibling.version)!r}, with the version it got)"
            )
            continue
        older = [
            v
            for v in released_versions(sibling)
            if v < sibling.version and req.specifier.contains(v, prereleases=True)
        ]
        if older:
            problems.append(
                f"{where} [{section}]: {pkg.name} requires {req}, which admits {sibling.name} "
                f"{older[0]} (released, older than the {sibling.version} it is tested with here); "
                f"write {tested_range(sibling.name, sibling.version)!r}"
            )
    return problems


# --- changelog -------------------------------------------------------------------------------

_UNRELEASED = re.compile(r"^## \[Unreleased\][^\n]*\n?", re.M | re.I)
# The section ends at the next `## ` heading or at the link definitions at the bottom.
_SECTION_END = re.compile(r"^(## |\[[^\]]+\]:\s)", re.M)


def _unreleased_span(text: str, where: str) -> tuple[int, int, int]:
    """(heading start, body start, body end) of the Unreleased section."""
    heading = _UNRELEASED.search(text)
    if heading is None:
        raise ReleaseError(
            f"{where}: no '## [Unreleased]' section; add one (Keep a Changelog shape) with the "
            "changes of this release under it"
        )
    end = _SECTION_END.search(text, heading.end())
    return heading.start(), heading.end(), end.start() if end else len(text)


def unreleased_entries(text: str, where: str = "CHANGELOG.md") -> list[str]:
    """The entry lines under `## [Unreleased]` (headings, blanks and comments do not count)."""
    _, start, end = _unreleased_span(text, where)
    body = re.sub(r"<!--.*?-->", "", text[start:end], flags=re.S)
    return [
        line.strip()
        for line in body.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def release_changelog(
    text: str, version: Version | str, date: str, where: str = "CHANGELOG.md"
) -> str:
    """Changelog text with Unreleased moved to `## [version] - date` under a fresh Unreleased.

    Raises ReleaseError when Unreleased has no entries or the version already has a section.
    """
    if re.search(rf"^## \[{re.escape(str(version))}\]", text, re.M):
        raise ReleaseError(f"{where}: already has a '## [{version}]' section; pick a new version")
    if not unreleased_entries(text, where):
        raise ReleaseError(
            f"{where}: the '## [Unreleased]' section is empty; list this release's changes under "
            "it (### Added / ### Changed / ### Fixed ...), commit, then run the release again"
        )
    head, start, end = _unreleased_span(text, where)
    body = text[start:end].strip("\n")
    released = f"## [Unreleased]\n\n## [{version}] - {date}\n\n{body}\n"
    rest = text[end:]
    return text[:head] + released + ("\n" + rest if rest else "")


# --- pyproject version -----------------------------------------------------------------------


def bump_pyproject_version(text: str, version: Version | str, where: str = "pyproject.toml") -> str:
    """pyproject.toml text with [project] `version = "..."` set to version (nothing else changes)."""
    header = re.search(r"^\[project\][ \t]*$", text, re.M)
    if header is None:
        raise ReleaseError(f"{where}: no [project] table")
    following = re.search(r"^\[", text[header.end() :], re.M)
    end = header.end() + following.start() if following else len(text)
    section = text[header.end() : end]
    lines = list(re.finditer(r"^(version\s*=\s*)([\"'])([^\"']*)\2", section, re.M))
    if len(lines) != 1:
        raise ReleaseError(
            f'{where}: expected exactly one `version = "..."` line in [project], found '
            f"{len(lines)}; keep the version in that one place"
        )
    match = lines[0]
    pos = header.end() + match.start(3)
    bumped = text[:pos] + str(version) + text[header.end() + match.end(3) :]
    if tomllib.loads(bumped)["project"]["version"] != str(version):  # pragma: no cover - guard
        raise ReleaseError(f"{where}: bumping the version did not round-trip; edit it by hand")
    return bumped


# --- subprocesses ----------------------------------------------------------------------------


def _run(
    cmd: list[str],
    *,
    what: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> str:
    """Run cmd, return its stdout; on failure raise ReleaseError with `what` and the output tail."""
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise ReleaseError(f"{what}: {cmd[0]!r} not found; install it") from exc
    except subprocess.TimeoutExpired as exc:
        raise ReleaseError(f"{what}: timed out after {timeout:.0f} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise ReleaseError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def _git(root: Path, *args: str, what: str = "git") -> str:
    return _run(["git", "-C", str(root), *args], what=what)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}


def require_clean_tree(root: Path) -> None:
    """Raise unless `git status` shows no modified, staged or untracked (non-ignored) file."""
    status = _git(root, "status", "--porcelain", what="git status (is this a git checkout?)")
    if status.strip():
        files = [line[3:] for line in status.splitlines()][:10]
        raise ReleaseError(
            "the working tree is dirty (uncommitted or untracked: "
            + ", ".join(files)
            + "); commit or remove those changes first, so the release commit holds only the "
            "version bump and the changelog"
        )


def _tag_exists(root: Path, tag: str) -> bool:
    return bool(_git(root, "tag", "--list", tag).strip())


# --- building and checking -------------------------------------------------------------------


def build_package(pkg: Package, outdir: Path, *, no_isolation: bool = False) -> list[Path]:
    """Build pkg's sdist, then its wheel from that sdist, into outdir; return [sdist, wheel]."""
    outdir.mkdir(parents=True, exist_ok=True)
    before = set(outdir.iterdir())
    cmd = [sys.executable, "-m", "build", "--outdir", str(outdir), str(pkg.path)]
    if no_isolation:
        cmd.insert(3, "--no-isolation")
    _run(cmd, what=f"building {pkg.name}")
    built = sorted(set(outdir.iterdir()) - before)
    sdists = [p for p in built if p.name.endswith(".tar.gz")]
    wheels = [p for p in built if p.suffix == ".whl"]
    if len(sdists) != 1 or len(wheels) != 1:
        raise ReleaseError(f"building {pkg.name}: expected one sdist and one wheel, got {built}")
    return [sdists[0], wheels[0]]


def build_wheel(pkg: Package, outdir: Path, *, no_isolation: bool = False) -> Path:
    """Build only pkg's wheel into outdir and return its path."""
    outdir.mkdir(parents=True, exist_ok=True)
    before = set(outdir.iterdir())
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(pkg.path)]
    if no_isolation:
        cmd.insert(3, "--no-isolation")
    _run(cmd, what=f"building the {pkg.name} wheel")
    wheels = [p for p in set(outdir.iterdir()) - before if p.suffix == ".whl"]
    if len(wheels) != 1:
        raise ReleaseError(f"building {pkg.name}: expected one wheel, got {wheels}")
    return wheels[0]


def wheel_metadata(wheel: Path) -> dict[str, str]:
    """Name and Version (and the rest) from the METADATA file inside a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ReleaseError(f"{wheel.name}: expected one .dist-info/METADATA, found {names}")
        message = email.parser.Parser().parsestr(zf.read(names[0]).decode("utf-8"))
    return {key: str(value) for key, value in message.items()}


def check_wheel_version(wheel: Path, name: str, version: Version | str) -> None:
    """Raise unless the wheel's metadata carries this name and version."""
    meta = wheel_metadata(wheel)
    got_name, got_version = canonicalize_name(meta.get("Name", "")), meta.get("Version", "")
    if got_name != canonicalize_name(name) or Version(got_version) != Version(str(version)):
        raise ReleaseError(
            f"{wheel.name}: metadata says {got_name} {got_version}, expected {name} {version}; "
            "rebuild from a clean tree"
        )


def twine_check(files: list[Path]) -> None:
    """`twine check --strict` on the given sdist/wheel files."""
    _run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
        what="twine check",
    )


def internal_closure(pkg: Package, packages: Mapping[str, Package]) -> list[Package]:
    """Siblings pkg needs at install time, transitively (base dependencies + requested extras)."""
    needed: dict[str, Package] = {}
    todo: list[tuple[Package, set[str]]] = [(pkg, set())]
    while todo:
        current, extras = todo.pop()
        reqs = list(current.dependencies)
        for extra in extras:
            reqs += current.optional_dependencies.get(extra, ())
        for req in reqs:
            name = canonicalize_name(req.name)
            if name in packages and name != pkg.name and name not in needed:
                needed[name] = packages[name]
                todo.append((packages[name], set(req.extras)))
    return [needed[name] for name in sorted(needed)]


def smallest_example(pkg: Package) -> Path | None:
    """The smallest packages/<pkg>/examples/*.py by size (ties by name), or None."""
    examples = sorted((pkg.path / "examples").glob("*.py"), key=lambda p: (p.stat().st_size, p))
    return examples[0] if examples else None


def verify_in_fresh_venv(
    pkg: Package,
    version: Version,
    wheel: Path,
    sibling_wheels: list[Path],
    workdir: Path,
    log: Log = _log,
) -> None:
    """Install wheel + sibling wheels into a new venv (externals from the index), import, example.

    The sibling wheels are passed as files, so pip must take those very builds for the internal
    dependencies and fails if their versions do not satisfy the declared ranges. Nothing from the
    source tree is on the venv's path; the import runs from workdir.
    """
    venv_dir = workdir / "venv"
    env = _clean_env()
    _run([sys.executable, "-m", "venv", str(venv_dir)], what="creating the check venv", env=env)
    python = venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    log(
        f"installing {wheel.name}"
        + (f" with {', '.join(w.name for w in sibling_wheels)}" if sibling_wheels else "")
        + " into a fresh venv (external dependencies from the package index)"
    )
    _run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel), *map(str, sibling_wheels)],
        what=f"installing {wheel.name} in a fresh venv",
        env=env,
        cwd=workdir,
    )
    _run([str(python), "-m", "pip", "check"], what="pip check in the fresh venv", env=env)
    probe = (
        "import importlib, importlib.metadata as md, pathlib, sys\n"
        f"module = importlib.import_module({pkg.module!r})\n"
        f"found = md.version({pkg.name!r})\n"
        f"assert found == {str(version)!r}, f'installed version {{found}}, expected {version}'\n"
        "where = pathlib.Path(module.__file__).resolve()\n"
        "assert where.is_relative_to(pathlib.Path(sys.prefix).resolve()), where\n"
        "print(module.__name__, found, where)\n"
    )
    log(f"importing {pkg.module} from the fresh venv")
    _run([str(python), "-c", probe], what=f"importing {pkg.module}", env=env, cwd=workdir)
    example = smallest_example(pkg)
    if example is None:
        log(f"{pkg.name} has no examples/*.py; import check only")
        return
    log(f"running its smallest example, {example.name}")
    _run(
        [str(python), str(example)],
        what=f"example {example.name}",
        env=env,
        cwd=workdir,
        timeout=900,
    )


# --- credentials and publishing --------------------------------------------------------------


def twine_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """TWINE_USERNAME/TWINE_PASSWORD for twine from TWINE_API_KEY or the pair; raises if absent."""
    api_key = environ.get("TWINE_API_KEY", "").strip()
    if api_key:
        return {"TWINE_USERNAME": "__token__", "TWINE_PASSWORD": api_key}
    user, password = environ.get("TWINE_USERNAME", ""), environ.get("TWINE_PASSWORD", "")
    if user and password:
        return {"TWINE_USERNAME": user, "TWINE_PASSWORD": password}
    raise ReleaseError(
        "publishing needs credentials from the environment: set TWINE_API_KEY to a PyPI API "
        "token (or TWINE_USERNAME and TWINE_PASSWORD); nothing was uploaded"
    )


def _lookup(packages: Mapping[str, Package], package: str) -> Package:
    pkg = packages.get(canonicalize_name(package))
    if pkg is None:
        raise ReleaseError(f"unknown package {package!r}; choose one of: {', '.join(packages)}")
    return pkg


def dist_files(root: Path, pkg: Package, version: Version) -> list[Path]:
    """dist/'s sdist and wheel of pkg at version, or a ReleaseError naming the step to run."""
    dist = root / "dist"
    sdist = dist / f"{pkg.file_prefix}-{version}.tar.gz"
    wheels = sorted(dist.glob(f"{pkg.file_prefix}-{version}-*.whl"))
    if not sdist.is_file() or len(wheels) != 1:
        raise ReleaseError(
            f"dist/ lacks {pkg.name} {version} (want {sdist.name} and one wheel); run "
            f"`nox -s release -- {pkg.name} <version>` first"
        )
    return [sdist, wheels[0]]


def publish(
    package: str,
    root: Path = ROOT,
    environ: Mapping[str, str] | None = None,
    log: Log = _log,
) -> list[Path]:
    """Upload dist/'s sdist and wheel of the package's released version with twine.

    Needs credentials in environ (default os.environ), the tag `<package>-v<version>` and no change
    to the package since it; returns the uploaded files. TWINE_REPOSITORY_URL picks another index.
    """
    environ = os.environ if environ is None else environ
    creds = twine_credentials(environ)
    pkg = _lookup(discover_packages(root), package)
    tag = f"{pkg.name}-v{pkg.version}"
    if not _tag_exists(root, tag):
        raise ReleaseError(
            f"no tag {tag}: {pkg.name} {pkg.version} was not released; run "
            f"`nox -s release -- {pkg.name} <new version>` first"
        )
    require_clean_tree(root)
    changed = _git(root, "diff", "--name-only", tag, "--", _rel(pkg.path, root)).strip()
    if changed:
        raise ReleaseError(
            f"packages/{pkg.path.name} changed since {tag} ({changed.splitlines()[0]} ...); "
            f"publish from the tagged commit (git checkout {tag}) or release a new version"
        )
    files = dist_files(root, pkg, pkg.version)
    check_wheel_version(files[1], pkg.name, pkg.version)
    twine_check(files)
    log(f"uploading {', '.join(f.name for f in files)}")
    _run(
        [sys.executable, "-m", "twine", "upload", "--non-interactive", *map(str, files)],
        what="twine upload",
        env={**environ, **creds},
    )
    log(f"published {pkg.name} {pkg.version}")
    return files


# --- the release -----------------------------------------------------------------------------


def _parse_new_version(text: str) -> Version:
    try:
        version = Version(text)
    except InvalidVersion as exc:
        raise ReleaseError(f"version {text!r} is not a PEP 440 version like 0.2.0") from exc
    if str(version) != text:
        raise ReleaseError(f"version {text!r}: write it in canonical form, {version}")
    return version


def release(
    package: str,
    version: str,
    root: Path = ROOT,
    *,
    no_isolation: bool = False,
    publish_after: bool = False,
    today: str | None = None,
    log: Log = _log,
) -> str:
    """Release one package (see the module docstring) and return the tag it created."""
    packages = discover_packages(root)
    pkg = _lookup(packages, package)
    new = _parse_new_version(version)
    if publish_after:
        twine_credentials(os.environ)  # fail before touching anything
    require_clean_tree(root)
    if new <= pkg.version:
        raise ReleaseError(
            f"{pkg.name}: version {new} does not increase the current {pkg.version} "
            f"({_rel(pkg.pyproject, root)}); pass a higher version, e.g. "
            f"{pkg.version.major}.{pkg.version.minor}.{pkg.version.micro + 1}"
        )
    tag = f"{pkg.name}-v{new}"
    if _tag_exists(root, tag):
        raise ReleaseError(f"tag {tag} already exists; pick a higher version")
    date = today or datetime.date.today().isoformat()
    changelog_text = pkg.changelog.read_text(encoding="utf-8")
    new_changelog = release_changelog(changelog_text, new, date, _rel(pkg.changelog, root))
    problems = check_sibling_ranges(root, {pkg.name: new})
    if problems:
        raise ReleaseError(
            f"releasing {pkg.name} {new} would leave internal ranges broken:\n  "
            + "\n  ".join(problems)
        )
    problems = unreleased_sibling_problems(pkg, packages, root)
    if problems:
        raise ReleaseError(
            f"releasing {pkg.name} {new} would ship code its users' siblings lack:\n  "
            + "\n  ".join(problems)
        )
    pyproject_text = pkg.pyproject.read_text(encoding="utf-8")
    new_pyproject = bump_pyproject_version(pyproject_text, new, _rel(pkg.pyproject, root))

    log(f"{pkg.name}: {pkg.version} -> {new}, changelog section [{new}] - {date}")
    pkg.pyproject.write_text(new_pyproject, encoding="utf-8")
    pkg.changelog.write_text(new_changelog, encoding="utf-8")
    try:
        bumped = load_package(pkg.path, root)
        with tempfile.TemporaryDirectory(prefix=f"release-{pkg.name}-") as tmp:
            work = Path(tmp)
            log(f"building {pkg.name} {new} (sdist, then the wheel from it)")
            files = build_package(bumped, work / "dist", no_isolation=no_isolation)
            check_wheel_version(files[1], pkg.name, new)
            log("twine check --strict")
            twine_check(files)
            siblings = internal_closure(bumped, packages)
            sibling_wheels = []
            for sibling in siblings:
                log(f"building the sibling wheel {sibling.name} {sibling.version} from the tree")
                sibling_wheels.append(
                    build_wheel(sibling, work / "siblings", no_isolation=no_isolation)
                )
            verify_in_fresh_venv(bumped, new, files[1], sibling_wheels, work, log)
            dist = root / "dist"
            dist.mkdir(exist_ok=True)
            for old in dist.glob(f"{pkg.file_prefix}-*"):
                old.unlink()
            for built in files:
                shutil.copy2(built, dist / built.name)
        _git(
            root,
            "commit",
            "--quiet",
            "-m",
            f"Release {pkg.name} {new}",
            "--",
            _rel(pkg.pyproject, root),
            _rel(pkg.changelog, root),
            what="committing the release",
        )
    except BaseException:
        pkg.pyproject.write_text(pyproject_text, encoding="utf-8")
        pkg.changelog.write_text(changelog_text, encoding="utf-8")
        log("release aborted; the version and changelog edits were undone")
        raise
    _git(root, "tag", "-a", tag, "-m", f"{pkg.name} {new}", what=f"creating tag {tag}")
    log(f"committed 'Release {pkg.name} {new}' and tagged {tag}; dist/ holds {files[0].name}")
    log(f"push with: git push origin HEAD {tag}")
    if publish_after:
        publish(pkg.name, root, log=log)
    else:
        log(f"publish with: nox -s publish -- {pkg.name}")
    return tag


def main(argv: list[str] | None = None) -> int:
    """Command line: release / publish / check-ranges; returns the exit code."""
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="workspace root (default: repo)")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="bump, changelog, build, check, commit and tag")
    rel.add_argument("package", help="distribution name, e.g. paravt-rewards")
    rel.add_argument("version", help="the new version, e.g. 0.2.0")
    rel.add_argument("--publish", action="store_true", help="upload with twine afterwards")
    rel.add_argument(
        "--no-isolation",
        action="store_true",
        help="build with the running interpreter's hatchling instead of an isolated build env",
    )
    pub = sub.add_parser("publish", help="upload dist/'s files of the released version")
    pub.add_argument("package")
    sub.add_parser("check-ranges", help="check every internal dependency range")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.command == "release":
            release(
                args.package,
                args.version,
                root,
                no_isolation=args.no_isolation,
                publish_after=args.publish,
            )
        elif args.command == "publish":
            publish(args.package, root)
        else:
            problems = check_sibling_ranges(root)
            for problem in problems:
                print(problem)
            if problems:
                return 1
            _log("every internal dependency range admits its sibling's version in the tree")
    except ReleaseError as exc:
        print(f"release: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
