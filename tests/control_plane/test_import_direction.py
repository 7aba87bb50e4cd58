"""Packages whose modules import in one direction (``make lint`` keeps the same with
import-linter's ``publishing-direction`` contract; this says it as a test, with the cycle)."""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("control_plane", "shared", cache_dir=None)


@pytest.mark.parametrize("package", ["control_plane.publishing"])
def test_no_module_of_the_package_imports_one_that_imports_it_back(
    graph: grimp.ImportGraph, package: str
) -> None:
    modules = sorted(graph.find_children(package))
    cycles = [
        (importer, imported)
        for importer in modules
        for imported in modules
        if importer < imported
        and graph.find_shortest_chain(importer=importer, imported=imported) is not None
        and graph.find_shortest_chain(importer=imported, imported=importer) is not None
    ]
    assert cycles == []
