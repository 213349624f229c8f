"""Shared set-up for the runtime tests: clean rank variables, ready-made configs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runtime_workers, runtime_configs

from runtime_configs import ddp_config, single_device_config  # noqa: E402

RANK_VARIABLES = (
    "RESOLVER_CONFIG",
    "RUNTIME_REPORT_DIR",
    "RUNTIME_LAUNCHER_PID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
)

__all__ = ["ddp_config", "single_device_config"]


@pytest.fixture(autouse=True)
def _no_rank_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests start as a plain process: not a rank of anything."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session", autouse=True)
def _warm_imports() -> Iterator[None]:
    """Import what DDP imports lazily, once, so forked ranks do not each pay for it."""
    import torch._dynamo  # noqa: F401

    yield
