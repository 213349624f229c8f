"""The errors a collective raises when it is used wrongly, or asked for what its engine cannot do."""

from __future__ import annotations

__all__ = ["CollectiveMisuseError", "CollectiveNotSupportedError", "ReduceOpDtypeError"]


class CollectiveMisuseError(ValueError):
    """An operation was called with arguments it cannot work with: a rank that does not exist or
    is not in the group, tensors whose shapes or dtypes differ between ranks, a list of the wrong
    length, an unknown reduce op.

    It is raised *before* the engine is called (on every rank, for disagreements between ranks),
    so the group stays usable: engines often hang or crash on such input instead.
    """


class ReduceOpDtypeError(CollectiveMisuseError, TypeError):
    """A reduce op the tensor's dtype cannot take (``mean`` of integers, ``max`` of complex, ...)."""


class CollectiveNotSupportedError(NotImplementedError):
    """The collective's engine has no such operation (declared in ``unsupported_operations``)."""

    def __init__(self, collective: str, operation: str, reason: str) -> None:
        self.collective = collective
        self.operation = operation
        self.reason = reason
        super().__init__(
            f"the {collective} collective cannot do {operation!r}: {reason}\n"
            "  hint: express it with the operations it has (all_reduce, all_gather, broadcast, ...), "
            "or use a strategy whose collective supports it"
        )
