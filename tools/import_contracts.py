"""The workspace's own import-linter contract type, `public_api`: deny by default.

A module of one package (paravt.core, paravt.tools, ...) may import from another package only
that package's root (its `__init__`, whose `__all__` is the public API) or a module on the
contract's `public` list, which is kept in one place (the workspace's pyproject.toml). Every other
module of a package is private to it: a new internal module is private from the day it is written,
with nothing to list. `lint-imports` (the lint session) loads it by the `contract_types` line of
pyproject.toml (it runs from the workspace root, which import-linter puts on `sys.path`).

`private_imports` is the rule itself on plain (importer, imported) pairs; it needs no import-linter,
so the workspace tests check it without one (tests/test_import_contracts.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def package_of(module: str, packages: Sequence[str]) -> str | None:
    """The package (one of `packages`) that `module` belongs to, or None."""
    owners = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(owners, key=len) if owners else None


def private_imports(
    imports: Iterable[tuple[str, str]], packages: Sequence[str], public: Iterable[str]
) -> list[tuple[str, str]]:
    """The (importer, imported) pairs that cross from one package into another package's private
    module: not the other package's root and not on `public`. Sorted."""
    allowed = set(public) | set(packages)
    bad = set()
    for importer, imported in imports:
        theirs = package_of(imported, packages)
        if theirs is None or theirs == package_of(importer, packages):
            continue
        if imported not in allowed:
            bad.add((importer, imported))
    return sorted(bad)


try:
    from importlinter import Contract, ContractCheck, fields, output
except ImportError:  # the tests session has no import-linter; only `private_imports` is used there
    pass
else:

    class PublicApiContract(Contract):
        """Options: `packages` (the root packages whose modules are private to each other) and
        `public` (the modules besides each package's root that the other packages may import)."""

        type_name = "public_api"
        packages = fields.ListField(subfield=fields.StringField())
        public = fields.ListField(subfield=fields.StringField())

        def check(self, graph: Any, verbose: bool) -> ContractCheck:
            packages: list[str] = list(self.packages)  # type: ignore[call-overload]
            public: list[str] = list(self.public)  # type: ignore[call-overload]
            unknown = sorted(m for m in (*packages, *public) if m not in graph.modules)
            imports = [
                (importer, imported)
                for importer in graph.modules
                for imported in graph.find_modules_directly_imported_by(importer)
            ]
            bad = private_imports(imports, packages, public)
            lines = {
                pair: sorted(
                    d["line_number"]
                    for d in graph.get_import_details(importer=pair[0], imported=pair[1])
                )
                for pair in bad
            }
            return ContractCheck(
                kept=not bad and not unknown,
                metadata={"private_imports": bad, "lines": lines, "unknown": unknown},
            )

        def render_broken_contract(self, check: ContractCheck) -> None:
            for module in check.metadata["unknown"]:
                output.print_error(
                    f"{module} is listed in the contract but is no module (stale entry?)",
                    bold=False,
                )
                output.new_line()
            for importer, imported in check.metadata["private_imports"]:
                where = ", ".join(map(str, check.metadata["lines"][(importer, imported)]))
                output.print_error(f"- {importer} -> {imported} (l.{where})", bold=False)
                output.new_line()
            if check.metadata["private_imports"]:
                output.print_error(
                    "Each imports another package's private module: import the package's root "
                    "(its __all__) instead, or add the module to this contract's `public` list "
                    "in pyproject.toml.",
                    bold=False,
                )
                output.new_line()
