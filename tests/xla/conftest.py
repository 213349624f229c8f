"""The XLA tests: real torch_xla on XLA:CPU (``PJRT_DEVICE=CPU``), in the XLA environment.

They need torch_xla, which the main environment does not have (it pins another torch); CI runs
them in the environment ``.ci/xla-env.sh`` builds. Without torch_xla each module is skipped, saying so.

A process can start torch_xla's replicas only while its own XLA runtime has not started, so this
pytest process never touches an XLA device: work runs in launched replicas or in a fresh child.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # xla_workers, importable by spawned children
os.environ.setdefault("PJRT_DEVICE", "CPU")

CHILD_TIMEOUT = 240


@pytest.fixture(autouse=True)
def _one_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA:CPU with one device unless a test asks for more; no rank variables from outside."""
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    for name in ("RESOLVER_CONFIG", "RUNTIME_REPORT_DIR", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def in_fresh_process() -> Callable[..., Any]:
    """Run a module-level function in a new process (its own XLA runtime) and return its result."""

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(fn, *args, **kwargs).result(timeout=CHILD_TIMEOUT)

    return run
