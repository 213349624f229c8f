"""Horovod tests: real Horovod processes over Gloo on 127.0.0.1.

Without Horovod installed they are skipped with the reason, unless ``RESOLVER_REQUIRE_HOROVOD=1``
(set by CI, which always builds Horovod with ``scripts/build-horovod.sh``): then they fail.

Horovod's runner starts fresh interpreters that unpickle the work functions by module name, so
this directory and the contract cases' are put on ``PYTHONPATH`` for them (for these tests only).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CONTRACT = HERE.parent / "contract"
RUNTIME_TESTS = HERE.parent / "runtime"  # misuse_workers: the strategy misuse sweep
for _path in (HERE, CONTRACT, RUNTIME_TESTS):
    sys.path.insert(0, str(_path))

HOROVOD_INSTALLED = importlib.util.find_spec("horovod") is not None
REQUIRED = os.environ.get("RESOLVER_REQUIRE_HOROVOD") == "1"
MISSING = "horovod is not installed; build it for this torch with scripts/build-horovod.sh (CI always does)"


@pytest.fixture(autouse=True)
def _needs_horovod() -> None:
    if HOROVOD_INSTALLED:
        return
    if REQUIRED:
        pytest.fail(f"RESOLVER_REQUIRE_HOROVOD=1 but {MISSING}")
    pytest.skip(MISSING)


@pytest.fixture(autouse=True)
def _clean_rank_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HOROVOD_") or name in (
            "RESOLVER_CONFIG",
            "RUNTIME_REPORT_DIR",
            "RUNTIME_LAUNCHER_PID",
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(name)
    inherited = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(CONTRACT), str(RUNTIME_TESTS), *inherited]))
