"""A new ``resolver explain`` process served by the compiled table cache loads only what it uses:
not the rule-file reader, the compiler, networkx, cattrs, tomli_w, the help texts, the code
generator (a process that resolves a few times never generates code), or standard modules that cost
milliseconds to import (hashlib, pathlib, socket, shutil). Its time is measured by
``tests/benchmarks/test_engine_speed.py::test_cold_explain_process`` and
``tests/benchmarks/cold_explain.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import pytest

from resolver._engine.values import Provenance, fields_repr

#: Imported only when a table is compiled, help is printed, a machine is simulated or a name is unknown.
NOT_ON_THE_COLD_PATH = (
    "networkx",
    "cattrs",
    "tomli_w",
    "tomllib",
    "hashlib",
    "importlib.metadata",  # the plugins' entry points are read from the cache folder (resolver.plugins)
    "pathlib",
    "socket",
    "shutil",
    "resolver._engine.loading",
    "resolver._engine.compile",
    "resolver._engine.schema",
    "textwrap",  # help
    "resolver.cli.run",  # the other commands' modules
    "resolver.cli.check",
    "resolver.cli.env",
    "resolver.cli.golden",
    "resolver.cli.rules",
    "resolver.cli.simulate",
    "resolver._engine.suggest",
    "resolver.cli.decision_graph",
    "resolver._engine.codegen",
    "resolver._engine.codewriter",
    "resolver._engine.declared",
    "resolver._engine.slot_graph",
)

_MODULES_AFTER = """
import json, runpy, sys
sys.argv = ["resolver", *sys.argv[1:]]
try:
    runpy.run_module("resolver", run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules(cache: str, *argv: str) -> tuple[int, set[str]]:
    env = dict(os.environ, RESOLVER_CACHE_DIR=cache)
    result = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.rstrip().rsplit("\n", 1)[-1])
    return data["code"], set(data["modules"])


def _at_start() -> set[str]:
    """What the interpreter itself loaded (site hooks may load some of the modules above)."""
    code = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(result.stdout))


@pytest.mark.parametrize(
    "argv",
    [
        ("explain", "--devices", "2", "--strategy", "ddp"),
        ("explain", "--accelerator", "cpu", "--devices", "2", "--strategy", "fsdp", "--precision", "bf16-mixed"),
    ],
)
def test_a_cached_explain_loads_neither_the_compiler_nor_the_help(tmp_path, argv):
    cache = str(tmp_path / "cache")
    assert _modules(cache, *argv)[0] == 0  # fills the cache: compiled here
    code, modules = _modules(cache, *argv)
    assert code == 0
    loaded = (modules - _at_start()) & set(NOT_ON_THE_COLD_PATH)
    assert not loaded, f"imported on a cached `resolver {' '.join(argv)}`: {sorted(loaded)}"


def test_help_still_lists_what_the_table_accepts(tmp_path):
    env = dict(os.environ, RESOLVER_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "resolver", "explain", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "one of: auto, " in result.stdout and "resolve for a machine you are not on" in result.stdout
    assert "examples:\n  resolver explain --devices 2 --strategy ddp" in result.stdout


@pytest.mark.parametrize("calls", [1, 10])
def test_a_process_resolving_a_few_times_loads_neither_the_compiler_nor_the_code_generator(tmp_path, calls):
    """Once (a launched rank) or a few times (a script): the code is generated only for a process
    that goes on resolving (resolver._engine.evaluator.GENERATE_AFTER)."""
    env = dict(os.environ, RESOLVER_CACHE_DIR=str(tmp_path / "cache"))
    code = (
        f"import json, sys, resolver\nfor _ in range({calls}):\n"
        "    resolver.resolve(devices=2, strategy='ddp', environment=resolver.Environment())\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    for _ in range(2):  # the first fills the cache
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    loaded = (set(json.loads(result.stdout)) - _at_start()) & set(NOT_ON_THE_COLD_PATH)
    assert not loaded, f"imported by {calls} resolve() served by the cache: {sorted(loaded)}"


@attrs.frozen
class _AttrsOwn:  # the repr attrs writes
    number: int
    hidden: object = attrs.field(default=None, repr=False)
    items: tuple[object, ...] = ()
    text: str = attrs.field(default="", repr=str.upper)


@attrs.frozen
class _Shared:  # the same fields, with the package's shared repr
    number: int
    hidden: object = attrs.field(default=None, repr=False)
    items: tuple[object, ...] = ()
    text: str = attrs.field(default="", repr=str.upper)

    __repr__ = fields_repr


@attrs.define
class _Node:
    children: list[object] = attrs.field(factory=list)

    __repr__ = fields_repr


def test_the_shared_repr_writes_what_attrs_writes():
    own = repr(_AttrsOwn(1, "x", (_AttrsOwn(2), "text"), "shout"))
    assert repr(_Shared(1, "x", (_Shared(2), "text"), "shout")) == own.replace("_AttrsOwn", "_Shared")
    assert (
        repr(Provenance("flag", "devices=2"))
        == "Provenance(kind='flag', source='devices=2', rule=None, why=None, inputs=())"
    )
    node = _Node()
    node.children.append(node)  # a value that holds itself is written as attrs writes it
    assert repr(node) == "_Node(children=[...])"


@pytest.mark.parametrize("before", [True, False])
def test_importing_the_engine_leaves_the_garbage_collector_as_it_found_it(before):
    """resolver.api pauses the collector while the engine's modules load, and only then."""
    code = f"import gc\nif not {before}: gc.disable()\nimport resolver.api\nprint(gc.isenabled())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(before)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/resolver", "explain", "--devices", "2"], True),  # the console script
        (["/src/resolver/__main__.py", "explain"], True),  # python -m resolver
        (["/venv/bin/resolver", "run", "train.py"], False),
        (["/venv/bin/resolver", "--version"], False),
        (["/venv/bin/pytest", "explain"], False),
        (["/src/other/__main__.py", "explain"], False),  # python -m other explain
    ],
)
def test_only_a_resolver_explain_process_runs_without_the_garbage_collector(argv, expected):
    from resolver.cli.gc_pause import explain_only

    assert explain_only(argv) is expected


def test_importing_the_command_line_leaves_the_garbage_collector_on():
    code = "import gc, sys\nsys.argv = ['tool', 'explain']\nimport resolver.cli\nprint(gc.isenabled())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
