"""Machine snapshots for the resolver tests (no test probes the real machine), and the virtual
environment holding the example plugin that the plugin tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from resolver import Environment
from tests.support.plugin_venv import make_venv


@pytest.fixture
def laptop() -> Environment:
    """A CPU-only machine, no cluster."""
    return Environment(hostname="laptop")


@pytest.fixture
def gpu_box() -> Environment:
    """One machine with 8 visible CUDA devices."""
    return Environment(cuda_device_count=8, hostname="gpu-box")


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fresh virtual environment holding torch, this project and the example plugin, all pip-installed:
    built once for every test that asks (``test_plugins.py``, ``test_plugin_parity.py``)."""
    return make_venv(tmp_path_factory.mktemp("plugin-venv"))
