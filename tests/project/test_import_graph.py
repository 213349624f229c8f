"""scripts/import_graph.py, the check CI runs for import circles: type-only imports count too."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_graph.py"


def _load_script() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_graph_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for file, text in files.items():
        (folder / file).write_text(textwrap.dedent(text))


def test_a_circle_closed_by_an_import_under_type_checking_is_counted(tmp_path: Path) -> None:
    graph_script = _load_script()
    _package(
        tmp_path,
        "typeonly_circle_pkg",
        {
            "hub.py": "from typeonly_circle_pkg import helper\n",
            "helper.py": """
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from typeonly_circle_pkg.hub import Hub
            """,
        },
    )
    graph = graph_script.build_graph(tmp_path, ("typeonly_circle_pkg",))  # type: ignore[attr-defined]
    assert graph_script.circles(graph) == [["typeonly_circle_pkg.helper", "typeonly_circle_pkg.hub"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("option", [[], ["--summary"]])
def test_the_tree_has_no_circle_even_counting_type_only_imports(option: list[str]) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *option], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "circles 0 (0 modules in them)" in done.stdout
