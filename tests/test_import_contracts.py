"""Deny by default (tools/import_contracts.py, the `public_api` contract of pyproject.toml): a
module of one package imports from another only its root or a module on the one public list."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_contracts():
    spec = importlib.util.spec_from_file_location(
        "paravt_import_contracts", ROOT / "tools" / "import_contracts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


contracts = _load_contracts()


def _public_api_contract() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "public_api"
    ]
    return contract


PACKAGES = ["paravt.core", "paravt.tools", "paravt.train"]


def test_another_packages_private_module_is_refused_and_its_root_or_public_list_allowed() -> None:
    imports = [
        ("paravt.train.sft", "paravt.core"),  # a root: public
        ("paravt.train.sft", "paravt.core.engines"),  # on the list
        ("paravt.train.sft", "paravt.core.runtime"),  # private
        ("paravt.train.sft", "paravt.core.new_module"),  # private from the day it is written
        ("paravt.core.cli", "paravt.core.runtime"),  # inside one package: not checked
        ("paravt.train.sft", "torch"),  # outside the packages: not checked
        ("paravt.core.runtime", "paravt.core"),
    ]
    bad = contracts.private_imports(imports, PACKAGES, ["paravt.core.engines"])
    assert bad == [
        ("paravt.train.sft", "paravt.core.new_module"),
        ("paravt.train.sft", "paravt.core.runtime"),
    ]


def test_a_module_belongs_to_the_longest_package_that_holds_it() -> None:
    packages = ["paravt.core", "paravt.core.testing"]
    assert contracts.package_of("paravt.core.testing.scripted", packages) == "paravt.core.testing"
    assert contracts.package_of("paravt.core.runtime", packages) == "paravt.core"
    assert contracts.package_of("paravt.corex", packages) is None


def test_every_module_on_the_public_list_exists() -> None:
    contract = _public_api_contract()
    missing = []
    for module in [*contract["packages"], *contract["public"]]:
        top, name, *rest = module.split(".")
        src = ROOT / "packages" / f"{top}-{name}" / "src" / top / name / Path(*rest)
        if not (src.with_suffix(".py").is_file() or (src / "__init__.py").is_file()):
            missing.append(module)
    assert not missing, f"public list names modules that do not exist: {missing}"


def test_the_packages_keep_to_their_public_apis() -> None:
    """The same check as `lint-imports` on today's source (needs grimp, import-linter's graph)."""
    grimp = pytest.importorskip("grimp")
    contract = _public_api_contract()
    graph = grimp.build_graph(*contract["packages"])
    imports = [
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
    ]
    assert contracts.private_imports(imports, contract["packages"], contract["public"]) == []
