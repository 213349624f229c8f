"""Machine snapshots for the resolver tests (no test probes the real machine)."""

from __future__ import annotations

import pytest

from resolver import Environment


@pytest.fixture
def laptop() -> Environment:
    """A CPU-only machine, no cluster."""
    return Environment(hostname="laptop")


@pytest.fixture
def gpu_box() -> Environment:
    """One machine with 8 visible CUDA devices."""
    return Environment(cuda_device_count=8, hostname="gpu-box")
