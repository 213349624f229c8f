"""The collective contract suite on the Horovod collective: 2 real Horovod processes over Gloo."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from collective_cases import CASE_NAMES, CaseResult, check

import runtime

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def results_for() -> Callable[[int], dict[str, CaseResult]]:
    cache: dict[int, dict[str, CaseResult]] = {}

    def results(world_size: int) -> dict[str, CaseResult]:
        if world_size not in cache:
            from horovod_workers import run_contract

            cache[world_size] = runtime.launch(
                run_contract, accelerator="cpu", devices=world_size, strategy="horovod", timeout=120
            )
        return cache[world_size]

    return results


@pytest.mark.parametrize("name", CASE_NAMES)
def test_horovod_collective(results_for: Callable[[int], dict[str, CaseResult]], name: str) -> None:
    check(results_for(2), name)
