"""ARCHITECTURE.md §2's rule for the files loaded by path, as an import-linter contract type
(`by_path` in pyproject.toml's [tool.importlinter]).

Files under bundles/base and bundles/examples have no __init__.py: an agent process loads them
by path, so import-linter's graph has no node for them and this contract reads them itself. Of
our packages they import only what is allowed (the SDK and protocol); a sibling file is named
only for the type checker, under `if TYPE_CHECKING:`, and loaded through
`bundles.sdk.load_sibling` at run time: imported by name it would be a second copy of the file,
with its own module state.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


@dataclass(frozen=True, slots=True)
class Imported:
    line: int
    module: str
    names: tuple[str, ...]  # `from module import names`; empty for `import module`
    type_checking: bool  # under `if TYPE_CHECKING:`


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(node: ast.AST, type_checking: bool = False) -> list[Imported]:
    """Every absolute import in `node`, nested ones too (in functions, try blocks)."""
    if isinstance(node, ast.Import):
        return [Imported(node.lineno, a.name, (), type_checking) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        names = tuple(a.name for a in node.names)
        relative = node.level > 0 or not node.module
        return [] if relative else [Imported(node.lineno, node.module, names, type_checking)]
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        found = [i for child in node.body for i in imports_of(child, True)]
        return found + [i for child in node.orelse for i in imports_of(child, type_checking)]
    return [i for child in ast.iter_child_nodes(node) for i in imports_of(child, type_checking)]


def _within(module: str, allowed: list[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def _permitted(imp: Imported, allowed: list[str], for_types: list[str]) -> bool:
    allow = allowed + for_types if imp.type_checking else allowed
    if _within(imp.module, allow):
        return True
    # `from bundles import sdk` names the module it imports
    return bool(imp.names) and all(_within(f"{imp.module}.{n}", allow) for n in imp.names)


class ByPathContract(Contract):
    """Of the root packages, files under `directories` import only `allowed` (and, for the
    type checker only, `allowed_for_type_checking`)."""

    directories = fields.ListField(subfield=fields.StringField())
    allowed = fields.ListField(subfield=fields.StringField())
    allowed_for_type_checking = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        ours = set(self.session_options["root_packages"])
        for_types = list(self.allowed_for_type_checking or [])
        broken: list[str] = []
        files = 0
        for directory in self.directories:
            for path in sorted(Path(directory).rglob("*.py")):
                files += 1
                for imp in imports_of(ast.parse(path.read_text(), filename=str(path))):
                    if imp.module.split(".")[0] not in ours:
                        continue
                    if not _permitted(imp, list(self.allowed), for_types):
                        shown = imp.module + (f" ({', '.join(imp.names)})" if imp.names else "")
                        broken.append(f"{path}:{imp.line} imports {shown}")
        if files == 0:  # a renamed directory would otherwise keep the contract vacuously
            broken.append(f"no Python files under {', '.join(self.directories)}")
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Files loaded by path import only the SDK and protocol of ours:")
        output.new_line()
        for line in check.metadata["broken"]:
            output.indent_cursor()
            output.print_error(line, bold=False)
        output.new_line()
