"""What is private stays private: the runtime reaches resolver through its public modules and names
and one named interface module, and every public class of the runtime lives in a public module."""

from __future__ import annotations

import importlib
import inspect
import tomllib
from pathlib import Path

import grimp

import runtime

ROOT = Path(__file__).resolve().parents[2]


def _surface_contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(contract for contract in contracts if contract["id"] == "runtime-resolver-surface")


def test_the_runtime_imports_no_private_resolver_module_not_even_for_type_checking() -> None:
    """lint-imports checks the contract without the imports under ``if TYPE_CHECKING:``; here they count."""
    forbidden = tuple(_surface_contract()["forbidden_modules"])  # type: ignore[arg-type]
    assert "resolver._domain" in forbidden
    graph = grimp.build_graph("runtime", "resolver", cache_dir=None, exclude_type_checking_imports=False)
    found = [
        f"{detail['importer']}:{detail['line_number']}: {detail['line_contents']}"
        for importer in sorted(graph.modules)
        if importer.split(".")[0] == "runtime"
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if any(imported == module or imported.startswith(module + ".") for module in forbidden)
        for detail in graph.get_import_details(importer=importer, imported=imported)
    ]
    assert not found, "use resolver's public names or resolver._runtime_interface:\n" + "\n".join(found)


def test_every_public_class_of_the_runtime_lives_in_a_public_module() -> None:
    private = {}
    for name in runtime.__all__:
        value = getattr(runtime, name)
        if inspect.isclass(value) and any(part.startswith("_") for part in value.__module__.split(".")):
            private[name] = value.__module__
    assert not private, f"public classes in internal modules: {private}"
    assert runtime.RankOutput.__module__ == "runtime.launchers.rank_output"


def test_every_public_name_of_the_runtime_can_be_imported_from_a_public_module() -> None:
    homes = {name: module for name, module in runtime._MODULES.items() if name in runtime.__all__}
    private = {name: module for name, module in homes.items() if any(p.startswith("_") for p in module.split("."))}
    assert not private, f"public names whose module is internal: {private}"
    assert all(
        getattr(importlib.import_module(module), name) is getattr(runtime, name) for name, module in homes.items()
    )
    from runtime.rank_context import launched_config

    assert launched_config is runtime.launched_config
