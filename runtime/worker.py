"""What a launched rank runs: its strategy, built from the config its launcher handed down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from runtime.build import build
from runtime.rank_environment import CONFIG_VARIABLE, launched_config

__all__ = ["run_worker"]

R = TypeVar("R")


def run_worker(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """Build this rank's strategy from ``RESOLVER_CONFIG`` and run ``fn(strategy, *args, **kwargs)``."""
    config = launched_config()
    if config is None:
        raise RuntimeError(f"run_worker runs inside a launched rank, but {CONFIG_VARIABLE} is not set")
    return build(config).run(fn, *args, **kwargs)
