"""The collective contract, on the single-device collective (a group of one, in this process)."""

from __future__ import annotations

import pytest
from collective_cases import CASE_NAMES, CaseResult, check, run_cases

from runtime.collectives import SingleDeviceCollective
from runtime.collectives.rendezvous import Rendezvous


@pytest.fixture(scope="module")
def results() -> dict[str, CaseResult]:
    collective = SingleDeviceCollective()
    collective.setup(Rendezvous(rank=0, world_size=1))
    try:
        return run_cases(collective)
    finally:
        collective.teardown()


@pytest.mark.parametrize("name", CASE_NAMES)
def test_single_device_collective(results: dict[str, CaseResult], name: str) -> None:
    check(results, name)
