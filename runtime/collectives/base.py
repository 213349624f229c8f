"""Collective: every distributed communication the runtime makes goes through one of these."""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any, Literal, TypeVar

import torch

__all__ = ["REDUCE_OPS", "Collective", "ReduceOp"]

ReduceOp = Literal["sum", "mean", "max", "min"]
#: The reduction names every collective accepts.
REDUCE_OPS: tuple[str, ...] = ("sum", "mean", "max", "min")

T = TypeVar("T")


def check_reduce_op(op: str, tensor: torch.Tensor) -> None:
    """Reject unknown ops, and ``mean`` of integer tensors (which cannot hold the quotient)."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; use one of {', '.join(REDUCE_OPS)}")
    if op == "mean" and not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(
            f"reduce op 'mean' needs a floating-point tensor, got {tensor.dtype}; "
            "convert it (tensor.float()) or reduce with 'sum'"
        )


class Collective(ABC):
    """Communication among the ``world_size`` processes of a run.

    Tensor operations work in place where the engine does and return the result, so
    ``x = collective.all_reduce(x)`` is always right. Between :meth:`setup` and
    :meth:`teardown`, :attr:`rank` and :attr:`world_size` describe this process.
    """

    def __init__(self) -> None:
        self._rank = 0
        self._world_size = 1

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self._rank

    @property
    def world_size(self) -> int:
        """How many processes take part."""
        return self._world_size

    @property
    @abstractmethod
    def is_initialized(self) -> bool:
        """Whether :meth:`setup` has run (and :meth:`teardown` has not)."""

    @abstractmethod
    def setup(
        self,
        rank: int,
        world_size: int,
        backend: str | None = None,
        master_addr: str = "127.0.0.1",
        master_port: int | None = None,
        timeout: timedelta | float | None = None,
        *,
        device: torch.device | None = None,
    ) -> None:
        """Join the group: ``rank`` of ``world_size`` processes meeting at ``master_addr:master_port``.

        ``timeout`` (seconds or a timedelta) bounds the rendezvous and every later operation;
        ``device`` is the device this process's tensors live on (some backends need it).
        """

    @abstractmethod
    def teardown(self) -> None:
        """Leave the group (no-op when not set up)."""

    @abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Every rank's ``tensor`` becomes rank ``src``'s."""

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """Every rank's ``tensor`` becomes the element-wise reduction over all ranks."""

    @abstractmethod
    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape on all ranks), ordered by rank."""

    @abstractmethod
    def reduce_scatter(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """Reduce ``tensor`` over ranks, then give rank ``r`` the ``r``-th of ``world_size``
        equal chunks along dimension 0 (whose size must divide by ``world_size``)."""

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank has arrived."""

    @abstractmethod
    def broadcast_object(self, obj: T, src: int = 0) -> T:
        """Rank ``src``'s picklable ``obj``, on every rank."""

    @abstractmethod
    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, ordered by rank."""

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002
        """Agree on a decision: ``all=True`` is true only if every rank says so, else if any does."""
        votes = self.all_reduce(torch.tensor(int(bool(decision)), dtype=torch.int32, device=self._device()))
        count = int(votes.item())
        return count == self.world_size if all else count > 0

    def _device(self) -> torch.device:
        return torch.device("cpu")
