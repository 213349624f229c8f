"""The collective contract, on the torch collective: 2 and 3 real processes over gloo on 127.0.0.1.

One launch per world size runs every case (``collective_cases.run_cases``); each case is then
its own test here. This module is the template for other backends' contract modules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from collective_cases import CASE_NAMES, CaseResult, check, run_cases

import runtime
from runtime import Strategy

pytestmark = pytest.mark.timeout(300)


def run_contract(strategy: Strategy) -> dict[str, CaseResult]:
    return run_cases(strategy.collective)


@pytest.fixture(scope="module")
def results_for() -> Callable[[int], dict[str, CaseResult]]:
    """One launch per world size, run the first time a test asks for it."""

    def results(world_size: int) -> dict[str, CaseResult]:
        return runtime.launch(run_contract, accelerator="cpu", devices=world_size, strategy="ddp_fork", timeout=60)

    return functools.cache(results)


@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("world_size", [2, 3])
def test_torch_collective(results_for: Callable[[int], dict[str, CaseResult]], world_size: int, name: str) -> None:
    check(results_for(world_size), name)
