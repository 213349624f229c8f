"""The contract suite itself: it fails a wrong collective and honours declared limitations."""

from __future__ import annotations

import pytest
import torch
from collective_cases import CASE_NAMES, CASES, run_cases

from runtime.collectives import OPERATIONS, CollectiveGroup, CollectiveNotSupportedError, SingleDeviceCollective
from runtime.collectives.rendezvous import Rendezvous


class NoScatter(SingleDeviceCollective):
    name = "no_scatter"
    unsupported_operations = {"scatter": "the engine has no scatter primitive"}

    def _scatter(self, *args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("never called: the operation is declared unsupported")


class NoBitwise(SingleDeviceCollective):
    name = "no_bitwise"
    unsupported_reduce_ops = dict.fromkeys(("band", "bor", "bxor", "product"), "the engine only adds and compares")


class WrongSum(SingleDeviceCollective):
    name = "wrong_sum"

    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        return tensor * 2


def results_of(collective: SingleDeviceCollective) -> dict[str, str]:
    collective.setup(Rendezvous(rank=0, world_size=1))
    return {name: result.status for name, result in run_cases(collective).items()}


def test_every_case_names_the_operations_it_uses() -> None:
    assert len(CASE_NAMES) >= 40
    operations = {op for case in CASES.values() for op in case.operations}
    assert operations == set(OPERATIONS), f"operations no case uses: {set(OPERATIONS) - operations}"


def test_a_declared_unsupported_operation_must_raise_precisely_and_skips_the_cases_using_it() -> None:
    statuses = results_of(NoScatter())
    assert statuses["unsupported_operations_raise_precisely"] == "passed"
    scatter_cases = [name for name, case in CASES.items() if "scatter" in case.operations]
    assert scatter_cases and all(statuses[name] == "skipped" for name in scatter_cases)
    assert statuses["all_reduce_gives_every_rank_the_reduction"] == "passed"


def test_a_wrong_result_fails_the_cases_that_see_it() -> None:
    statuses = results_of(WrongSum())
    assert statuses["all_reduce_gives_every_rank_the_reduction"] == "failed"
    assert statuses["all_gather_gives_every_rank_all_tensors_by_rank"] == "passed"


def test_a_declared_unsupported_reduce_op_must_raise_precisely() -> None:
    collective = NoBitwise()
    collective.setup(Rendezvous(rank=0, world_size=1))
    with pytest.raises(CollectiveNotSupportedError, match="the no_bitwise collective cannot do 'reduce': no 'product'"):
        collective.reduce(torch.ones(2), op="PRODUCT")
    results = run_cases(collective)
    checked = (
        "all_reduce_takes_every_reduce_op",
        "reduce_and_reduce_scatter_take_the_new_ops",
        "bitwise_ops_refuse_floating_point_tensors",
        "unsupported_reduce_ops_are_declared_with_reasons",
    )
    for name in checked:
        assert results[name].status == "passed", results[name].detail
