"""Shared fixtures: machine snapshots for the resolver tests (no test probes the real machine)."""

from __future__ import annotations

import os

import pytest

from resolver import Environment

# The tests compare the commands' plain text: a CI runner's FORCE_COLOR must not colour what they run.
os.environ.pop("FORCE_COLOR", None)


@pytest.fixture(autouse=True)
def _no_site_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The site rules of whoever runs the tests (RESOLVER_RULES) are not the table under test."""
    monkeypatch.delenv("RESOLVER_RULES", raising=False)


@pytest.fixture
def laptop() -> Environment:
    """A CPU-only machine, no cluster."""
    return Environment(hostname="laptop")


@pytest.fixture
def gpu_box() -> Environment:
    """One machine with 8 visible CUDA devices."""
    return Environment(cuda_device_count=8, hostname="gpu-box")
