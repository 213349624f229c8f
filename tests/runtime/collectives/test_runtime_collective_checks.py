"""At default settings ranks compare each distinct collective call once; full checks on demand."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from runtime_configs import ddp_config

import runtime
from runtime.collectives.base import CHECK_VARIABLE

pytestmark = pytest.mark.timeout(150)


def _outcome(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001  (the outcome is what the test looks at)
        return f"{type(exc).__name__}: {exc} {' '.join(getattr(exc, '__notes__', []))}"
    return "ok"


def first_call_differs(strategy: runtime.Strategy) -> str:
    """The first all_reduce already differs between ranks: compared, so every rank raises."""
    return _outcome(lambda: strategy.collective.all_reduce(torch.zeros(4 + strategy.global_rank)))


def later_call_differs(strategy: runtime.Strategy) -> list[str]:
    """Ranks agree on shape (4,) many times; then rank 1 alone passes a new shape."""
    c = strategy.collective
    for _ in range(3):
        c.all_reduce(torch.zeros(4))
    outcome = _outcome(lambda: c.all_reduce(torch.zeros(4 if strategy.global_rank == 0 else 5)))
    return [outcome]


def test_a_first_call_that_differs_between_ranks_raises_on_every_rank() -> None:
    outcome = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(first_call_differs)
    assert outcome.startswith("CollectiveMisuseError")


def test_a_later_call_that_differs_ends_at_the_timeout_saying_how_to_compare_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CHECK_VARIABLE, raising=False)
    strategy = runtime.build(ddp_config(2, launcher="fork"), timeout=8)
    with pytest.raises((runtime.LaunchTimeoutError, runtime.RankFailedError)) as failed:
        strategy.launch(later_call_differs)
    assert f"{CHECK_VARIABLE}=every" in str(failed.value)


def test_with_every_call_compared_a_later_difference_raises_a_misuse_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECK_VARIABLE, "every")
    outcome = runtime.build(ddp_config(2, launcher="fork"), timeout=60).launch(later_call_differs)
    assert outcome[0].startswith("CollectiveMisuseError")
