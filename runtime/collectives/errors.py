"""The errors a collective raises when it is used wrongly, or asked for what its engine cannot do."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BarrierTimeoutError",
    "CollectiveArgumentTypeError",
    "CollectiveMisuseError",
    "CollectiveNotSetUpError",
    "CollectiveNotSupportedError",
    "ReduceOpDtypeError",
]


class CollectiveMisuseError(ValueError):
    """An operation was called with arguments it cannot work with: a rank that does not exist or
    is not in the group, tensors whose shapes or dtypes differ between ranks, a list of the wrong
    length, an unknown reduce op.

    It is raised *before* the engine is called (on every rank, for disagreements between ranks),
    so the group stays usable: engines often hang or crash on such input instead.
    """


class CollectiveArgumentTypeError(CollectiveMisuseError, TypeError):
    """An argument of the wrong type (a list where a tensor belongs, a number where a rank does, ...).

    Raised on every rank of the group, before any rank communicates; the message names the
    operation, the argument, what it expects and what it got.
    """


class ReduceOpDtypeError(CollectiveMisuseError, TypeError):
    """A reduce op the tensor's dtype cannot take (``mean`` of integers, ``max`` of complex, ...)."""


class CollectiveNotSetUpError(CollectiveMisuseError, RuntimeError):
    """An operation was called before the collective's ``setup`` or after its ``teardown``."""

    def __init__(self, collective: str, operation: str, hint: str) -> None:
        self.collective = collective
        self.operation = operation
        super().__init__(
            f"{operation}: the {collective} collective is not set up (setup() has not run, or teardown() "
            f"already has)\n  hint: {hint}"
        )


class CollectiveNotSupportedError(CollectiveMisuseError, NotImplementedError):
    """The collective's engine has no such operation (declared in ``unsupported_operations``), or
    cannot do it with these arguments (a reduce op it lacks)."""

    def __init__(self, collective: str, operation: str, reason: str, hint: str | None = None) -> None:
        self.collective = collective
        self.operation = operation
        self.reason = reason
        hint = hint or (
            "express it with the operations it has (all_reduce, all_gather, broadcast, ...), "
            "or use a strategy whose collective supports it"
        )
        super().__init__(f"the {collective} collective cannot do {operation!r}: {reason}\n  hint: {hint}")


class BarrierTimeoutError(TimeoutError):
    """``monitored_barrier`` waited its timeout for ranks that did not arrive (:attr:`missing`, global ranks).

    It is what the waiting rank sees, not the cause: the launcher blames the missing ranks (with
    their stacks, where it can take them) when they are still running at the launch's end.
    """

    def __init__(self, operation: str, rank: int, missing: Sequence[int], timeout: float, detail: str) -> None:
        self.rank = rank
        self.missing = tuple(missing)
        self.timeout = timeout
        names = ", ".join(map(str, self.missing)) or "unknown"
        super().__init__(
            f"{operation}: rank {rank} waited {timeout:g} s for rank(s) {names}, which did not arrive "
            f"({detail})\n  hint: look at where those ranks are (their stacks, when the launch reports them): "
            "a rank that skips or reorders a collective, or hangs before it, never arrives"
        )
