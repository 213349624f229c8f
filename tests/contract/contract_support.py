"""What the contract cases share: the case registry, its result type and the helpers cases use.

The cases themselves live in ``collective_cases.py`` (the original operations) and in
``cases_operations.py`` / ``cases_arguments.py`` (the newer operations, argument checks); all
register into :data:`CASES` here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

import attrs
import pytest
import torch

from runtime.collectives import OPERATIONS, Collective

__all__ = ["CASES", "CaseResult", "ContractCase", "assert_still_usable", "case", "full", "raises_on_every_rank", "same"]

CaseFunction = Callable[[Collective, int, int], None]


@attrs.frozen
class ContractCase:
    """A case function, the operations it uses, and how many ranks it needs."""

    name: str
    function: CaseFunction
    operations: tuple[str, ...]
    min_world_size: int = 1


@attrs.frozen
class CaseResult:
    """One case's outcome over all ranks: ``detail`` holds the failing ranks' tracebacks or the skip reason."""

    name: str
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""


CASES: dict[str, ContractCase] = {}


def case(*operations: str, min_world_size: int = 1) -> Callable[[CaseFunction], CaseFunction]:
    def register(function: CaseFunction) -> CaseFunction:
        unknown = set(operations) - set(OPERATIONS)
        assert not unknown, f"{function.__name__} names unknown operations {unknown}"
        CASES[function.__name__] = ContractCase(function.__name__, function, operations, min_world_size)
        return function

    return register


# -- helpers --------------------------------------------------------------------------------------


def full(
    c: Collective, value: float, shape: tuple[int, ...] = (2, 3), dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return torch.full(shape, value, dtype=dtype, device=c.device)


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal values, dtype and shape."""
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, expected {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    )
    assert torch.equal(actual.cpu(), expected.cpu()), f"values {actual.tolist()}, expected {expected.tolist()}"


def raises_on_every_rank(c: Collective, error: type[BaseException], match: str, call: Callable[[], object]) -> None:
    """``call`` raises ``error`` matching ``match``, and the group still works afterwards."""
    with pytest.raises(error, match=re.compile(match, re.DOTALL)):  # messages end with a hint line
        call()
    assert_still_usable(c)


def assert_still_usable(c: Collective) -> None:
    same(c.all_reduce(full(c, 1.0, (2,))), full(c, float(c.world_size), (2,)))
