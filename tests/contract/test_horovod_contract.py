"""The collective contract suite on the Horovod collective: 2 real Horovod processes over Gloo."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from collective_cases import CASE_NAMES, CaseResult, check

import runtime

pytestmark = [pytest.mark.horovod, pytest.mark.usefixtures("horovod_ranks"), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def results_for() -> Callable[[int], dict[str, CaseResult]]:
    """One launch per world size, run the first time a test asks for it."""

    def results(world_size: int) -> dict[str, CaseResult]:
        from tests.support.horovod_workers import run_contract

        return runtime.launch(run_contract, accelerator="cpu", devices=world_size, strategy="horovod", timeout=120)

    return functools.cache(results)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_horovod_collective(results_for: Callable[[int], dict[str, CaseResult]], name: str) -> None:
    check(results_for(2), name)
