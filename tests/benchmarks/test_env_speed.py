"""How long `resolver env` takes where torch is not installed, next to `resolver explain` there.

Run with timings: pytest tests/benchmarks --benchmark-enable
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.support.cli_support
from tests.support.cli_support import python_without_torch, run_resolver  # noqa: E402


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_without_torch(tmp_path_factory.mktemp("no-torch") / "venv")


@pytest.mark.parametrize("args", [("env",), ("explain", "--simulate", "")], ids=["env", "explain"])
def test_command_without_torch(benchmark, bare_python, args):
    result = benchmark.pedantic(lambda: run_resolver(*args, python=bare_python), rounds=5, iterations=1)
    assert result.returncode == 0, result.stderr
