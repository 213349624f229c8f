"""A re-run worker compares the flags of the launch() it reaches with the flags recorded in the
config it was started with; it never resolves again."""

from __future__ import annotations

import pytest

import resolver
import runtime
from runtime._protocol import launched_rank
from runtime.errors import RuntimeConfigError


@pytest.fixture
def started_as_worker(monkeypatch: pytest.MonkeyPatch):
    """This process as a launched rank of a one-device run started by launch(devices=1, strategy='DDP')."""
    config = resolver.resolve(devices=1, strategy="DDP", accelerator="cpu", environment=resolver.Environment())
    monkeypatch.setenv("RESOLVER_CONFIG", config.to_json())
    monkeypatch.setattr(launched_rank, "_entered", False)
    return config


def test_the_config_records_the_flags_it_was_given(started_as_worker):
    assert dict(started_as_worker.flags) == {"accelerator": "cpu", "devices": 1, "strategy": "ddp"}


def test_the_same_flags_run_without_resolving_again(started_as_worker, monkeypatch: pytest.MonkeyPatch):
    # Resolving here would now fail (an override variable disagrees): the worker must not resolve.
    monkeypatch.setenv("RESOLVER_STRATEGY", "fsdp")
    result = runtime.launch(lambda strategy: strategy.world_size, devices=1, strategy="ddp", accelerator="CPU")
    assert result == 1


def test_other_flags_are_refused_naming_the_launch_reached(started_as_worker):
    with pytest.raises(RuntimeConfigError, match=r"reached launch\(accelerator='cpu', devices=1, strategy='fsdp'\)"):
        runtime.launch(lambda strategy: None, devices=1, strategy="fsdp", accelerator="cpu")
