"""The errors a collective raises when it is used wrongly, or asked for what its engine cannot do."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.errors import HintedError

__all__ = [
    "BarrierTimeoutError",
    "CollectiveArgumentTypeError",
    "CollectiveMisuseError",
    "CollectiveNotSetUpError",
    "CollectiveNotSupportedError",
    "ReduceOpDtypeError",
]


class CollectiveMisuseError(HintedError, ValueError):
    """An operation was called with arguments it cannot work with: a rank that does not exist or
    is not in the group, tensors whose shapes or dtypes differ between ranks, a list of the wrong
    length, an unknown reduce op.

    It is raised *before* the engine is called (on every rank, for disagreements between ranks),
    so the group stays usable: engines often hang or crash on such input instead. ``message`` says
    what is wrong, ``hint`` how to call it instead.
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
            f"{operation}: the {collective} collective is not set up (setup() has not run, or teardown() already has)",
            hint=hint,
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
        super().__init__(f"the {collective} collective cannot do {operation!r}: {reason}", hint=hint)


class BarrierTimeoutError(HintedError, TimeoutError):
    """``monitored_barrier`` gave up after its timeout.

    On the group's first rank (which collects the arrivals), :attr:`missing` holds the global ranks
    that did not arrive. On the other ranks it is empty: they only know that the first rank did not
    confirm (it found ranks missing, or is late itself). Either way it is what a waiting rank sees,
    not the cause: the launcher blames the ranks still running (with their stacks).
    """

    def __init__(self, rank: int, timeout: float | None, missing: Sequence[int] = (), first: int | None = None) -> None:
        self.rank = rank
        self.missing = tuple(missing)
        self.timeout = timeout
        limit = "the collective timeout" if timeout is None else f"{timeout:g} s"
        if first is None:
            what = f"rank {rank} waited {limit} for rank(s) {', '.join(map(str, self.missing))}, which did not arrive"
        else:
            what = (
                f"rank {rank} arrived, but rank {first} (which collects the arrivals) did not confirm within "
                f"{limit}: some rank did not arrive (rank {first}'s error names it), or rank {first} itself is late"
            )
        super().__init__(
            f"monitored_barrier: {what}",
            hint="look at where the missing ranks are (their stacks, when the launch reports them): a rank that "
            "skips or reorders a collective, or hangs before it, never arrives",
        )
