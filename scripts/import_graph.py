#!/usr/bin/env python
"""Count the import circles and the upward arrows of ``resolver`` and ``runtime``.

The graph is grimp's (every ``import`` statement, those inside functions and those under
``if TYPE_CHECKING:`` included: an annotation that needs a module above is as much a circle as an
import that runs, and lint-imports, which leaves type-only imports out, does not see it), plus the
dynamic imports: a string literal in a module that names a submodule of the two packages
(``importlib.import_module`` targets, the lazy ``__getattr__`` tables, the registries' built-in
module lists) counts as an arrow to that module.

A circle is a strongly connected component of more than one module. An upward arrow is an arrow
from an engine module (the domain-free core, the package :data:`ENGINE`) to a ``resolver`` module outside it,
from a module of one of ``resolver``'s layers (:data:`LAYERS`) to a higher one, or from a ``resolver``
module to ``runtime`` (the CLI's ``run`` and ``check`` commands may: they are counted apart).

    python scripts/import_graph.py            # the counts, each circle and each upward arrow
    python scripts/import_graph.py --summary  # the counts only

It exits with 1 when it finds a circle or an upward arrow (CI's import phase runs it).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import grimp
import networkx as nx

#: The domain-free engine (the package ``resolver._engine``): it may import only itself (and attrs,
#: cattrs, networkx).
ENGINE = "resolver._engine"
#: The resolver modules allowed to import runtime: the CLI's ``run`` and ``check`` commands.
RUN_COMMANDS = ("resolver.cli.run", "resolver.cli.check")


#: resolver's layers, bottom to top (as pyproject.toml's ``resolver-layers`` contract lists them): a module
#: may import its own layer and those below. ``resolver`` itself (its ``__init__``) is in none.
LAYERS = (
    ("resolver._engine", "resolver._version"),
    ("resolver._store",),
    ("resolver.plugins",),
    ("resolver._domain",),
    ("resolver._snapshot",),
    ("resolver.flagsfile", "resolver.api", "resolver.golden"),
    ("resolver._runtime_interface",),
    ("resolver.cli", "resolver.__main__"),
)


def _layer(module: str) -> int | None:
    for index, packages in enumerate(LAYERS):
        if any(_within(module, package) for package in packages):
            return index
    return None


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def build_graph(root: Path, packages: tuple[str, ...] = ("resolver", "runtime")) -> nx.DiGraph:
    """Every module of ``packages`` (found under ``root``) and the arrows between them."""
    sys.path.insert(0, str(root))
    graph = grimp.build_graph(*packages, cache_dir=None, exclude_type_checking_imports=False)
    modules = set(graph.modules)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            g.add_edge(module, imported, kind="import")
        for imported in _dynamic_imports(root, module, modules):
            if imported != module and not g.has_edge(module, imported):
                g.add_edge(module, imported, kind="dynamic")
    return g


def _dynamic_imports(root: Path, module: str, modules: set[str]) -> set[str]:
    parts = module.split(".")
    path = root.joinpath(*parts).with_suffix(".py")
    if not path.exists():
        path = root.joinpath(*parts, "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.split(":", 1)[0]  # "module:Class" names a module too
            if "." in name and name in modules:  # a bare "resolver" is more often a word (a folder's name)
                found.add(name)
    return found


def circles(g: nx.DiGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, largest first."""
    return sorted((sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1), key=len, reverse=True)


def upward_arrows(
    g: nx.DiGraph,
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(engine -> outside the engine, lower layer -> higher layer, resolver -> runtime), each as
    (importer, imported, kind)."""
    engine_up = []
    layer_up = []
    to_runtime = []
    for a, b, kind in sorted(g.edges(data="kind")):
        low, high = _layer(a), _layer(b)
        if low is not None and high is not None and low < high:
            layer_up.append((a, b, kind))
        if _within(a, ENGINE) and _within(b, "resolver") and not _within(b, ENGINE):
            engine_up.append((a, b, kind))
        if a.split(".")[0] == "resolver" and b.split(".")[0] == "runtime":
            to_runtime.append((a, b, kind))
    return engine_up, layer_up, to_runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", action="store_true", help="print the counts only")
    args = parser.parse_args(argv)
    g = build_graph(Path(__file__).resolve().parent.parent)
    found = circles(g)
    engine_up, layer_up, to_runtime = upward_arrows(g)
    outside_run = [e for e in to_runtime if e[0] not in RUN_COMMANDS]
    if not args.summary:
        for c in found:
            print(f"circle ({len(c)} modules): {' '.join(c)}")
        for a, b, kind in engine_up:
            print(f"engine up: {a} -> {b} ({kind})")
        for a, b, kind in layer_up:
            print(f"layer up: {a} -> {b} ({kind})")
        for a, b, kind in to_runtime:
            print(f"resolver -> runtime: {a} -> {b} ({kind})")
    print(
        f"modules {g.number_of_nodes()}, arrows {g.number_of_edges()}; "
        f"circles {len(found)} ({sum(map(len, found))} modules in them); "
        f"engine upward arrows {len(engine_up)}; resolver layer upward arrows {len(layer_up)}; "
        f"resolver -> runtime arrows {len(to_runtime)} ({len(outside_run)} outside {' and '.join(RUN_COMMANDS)})"
    )
    # CI runs this beside lint-imports: it also sees the dynamic imports ("module:Class" strings) and the
    # type-only ones.
    return 1 if found or engine_up or layer_up or outside_run else 0


if __name__ == "__main__":
    raise SystemExit(main())
