"""Every error a user may catch, and every name the docs call ``runtime.X`` or ``resolver.X``, is
importable from the package itself."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import resolver
import runtime

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS_TORCH_XLA = {"XLACheckpointIO"}


def exceptions_of(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    return [
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        # defined there; resolver's name their package, where users import them from, as their module
        and value.__module__ in (module_name, module_name.split(".")[0])
    ]


@pytest.mark.parametrize(
    ("package", "module_name"),
    [(runtime, "runtime.errors"), (runtime, "runtime.collectives.errors"), (resolver, "resolver._engine.errors")],
)
def test_every_exception_class_is_exported_by_its_package(package, module_name: str) -> None:
    names = exceptions_of(module_name)
    assert names, module_name
    for name in names:
        assert name in package.__all__, f"{module_name}.{name} is not in {package.__name__}.__all__"
        assert getattr(package, name) is getattr(importlib.import_module(module_name), name)


def test_the_rendezvous_errors_the_docs_name_are_runtime_errors_a_user_catches() -> None:
    from runtime import RendezvousTimeoutError, RendezvousWaitError  # as docs/runtime.md names them

    assert issubclass(RendezvousTimeoutError, runtime.LaunchTimeoutError)
    assert issubclass(RendezvousWaitError, TimeoutError)
    assert issubclass(runtime.ReduceOpDtypeError, runtime.CollectiveMisuseError)


def test_every_name_the_pages_call_runtime_or_resolver_dot_something_exists() -> None:
    named = {
        (package, name)
        for page in PAGES
        for package, name in re.findall(r"\b(runtime|resolver)\.([A-Z]\w*)", page.read_text(encoding="utf-8"))
    }
    assert ("runtime", "RendezvousWaitError") in named
    missing = []
    for package, name in sorted(named):
        if name in NEEDS_TORCH_XLA and importlib.util.find_spec("torch_xla") is None:
            continue
        if not hasattr(importlib.import_module(package), name):
            missing.append(f"{package}.{name}")
    assert not missing, f"the docs name {', '.join(missing)}, which the package does not export"


def test_xla_checkpoint_io_is_runtime_xla_checkpoint_io_where_torch_xla_is_installed() -> None:
    if importlib.util.find_spec("torch_xla") is None:
        with pytest.raises(ImportError, match="torch_xla"):
            runtime.XLACheckpointIO  # noqa: B018
    else:
        assert issubclass(runtime.XLACheckpointIO, runtime.TorchCheckpointIO)
