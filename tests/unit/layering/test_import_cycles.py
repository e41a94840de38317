"""No import cycles between the modules of a package (ARCHITECTURE.md §2: inside a package,
imports point from the composition root down to the leaves).

The orchestrator once had two: router <-> connections <-> deferred_calls and reload <->
self_restart, each hidden behind an `if TYPE_CHECKING:` import. The services now reach the
router through the Protocols of `orchestrator.routing.broker` and the daemon wires them, so
this keeps them from coming back. TYPE_CHECKING imports count: a cycle only the type checker sees is
still two modules that each need the other. grimp is the graph builder import-linter uses.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("protocol", "bundles", "orchestrator", "agent_process")


def cycles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, ...]]:
    """Each import cycle among the modules of `package`, once, as a chain that starts and ends
    at the same module (`a -> b -> a`)."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    found: list[tuple[str, ...]] = []
    seen: set[frozenset[str]] = set()
    for importer in sorted(modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & modules):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is None:
                continue
            cycle = (importer, *back)
            if frozenset(cycle) not in seen:
                seen.add(frozenset(cycle))
                found.append(cycle)
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(graph: grimp.ImportGraph, package: str) -> None:
    found = [" -> ".join(cycle) for cycle in cycles(graph, package)]
    assert found == [], "import cycles (pass the dependency in through a Protocol instead)"


def test_the_check_finds_a_cycle_and_reports_it_once() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    graph.add_import(importer="q.x", imported="p.a")  # from outside the package: no cycle
    assert cycles(graph, "p") == [("p.a", "p.b", "p.c", "p.a")]
    assert cycles(graph, "q") == []
