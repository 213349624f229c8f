"""What an asynchronous collective operation returns: a handle to wait on for its result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["CollectiveHandle"]

T = TypeVar("T")

_PENDING = object()


class CollectiveHandle(Generic[T]):
    """An operation started with ``async_op=True`` (or ``isend``/``irecv``).

    :meth:`wait` blocks until the operation is done and returns what the synchronous call would
    have returned (the reduced tensor, the gathered list, ...); calling it again returns the same.
    :meth:`is_completed` tells without blocking. The tensors passed in must not be read or written
    before :meth:`wait` returned. An engine without asynchronous operations runs them at once and
    returns a handle that is already complete.
    """

    def __init__(
        self,
        operation: str,
        finish: Callable[[], T],
        *,
        wait: Callable[[], object] | None = None,
        poll: Callable[[], bool] | None = None,
    ) -> None:
        self.operation = operation
        self._finish = finish
        self._wait = wait
        self._poll = poll
        self._result: Any = _PENDING

    @classmethod
    def completed(cls, operation: str, result: T) -> CollectiveHandle[T]:
        """A handle for an operation that already ran (engines without asynchronous operations)."""
        return cls(operation, lambda: result)

    @classmethod
    def of_work(cls, operation: str, work: Any, finish: Callable[[], T]) -> CollectiveHandle[T]:
        """A handle for a ``torch.distributed`` ``Work`` (``None``: the operation already ran)."""
        if work is None:
            return cls(operation, finish)
        return cls(operation, finish, wait=work.wait, poll=work.is_completed)

    def wait(self) -> T:
        """Block until the operation is done; return its result."""
        if self._result is _PENDING:
            if self._wait is not None:
                self._wait()
            self._result = self._finish()
        return self._result  # type: ignore[no-any-return]

    def is_completed(self) -> bool:
        """Whether the operation is done (then :meth:`wait` returns at once)."""
        return self._result is not _PENDING or self._poll is None or bool(self._poll())

    def __repr__(self) -> str:
        state = "completed" if self.is_completed() else "pending"
        return f"<CollectiveHandle {self.operation} {state}>"
