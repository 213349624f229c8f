"""The collective of a one-process run: every operation is the identity."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

import torch

from runtime.collectives.base import Collective, ReduceOp, check_reduce_op
from runtime.registry import register_collective

__all__ = ["SingleDeviceCollective"]

T = TypeVar("T")


@register_collective("single_device")
class SingleDeviceCollective(Collective):
    """A group of one: results are what this process passed in."""

    def __init__(self) -> None:
        super().__init__()
        self._initialized = False

    @property
    def is_initialized(self) -> bool:
        return self._initialized

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
        if world_size != 1 or rank != 0:
            raise ValueError(
                f"the single_device collective holds one process, but was asked to join as rank "
                f"{rank} of {world_size}; a multi-process run needs the 'torch' collective"
            )
        self._initialized = True

    def teardown(self) -> None:
        self._initialized = False

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        self._check_src(src)
        return tensor

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        check_reduce_op(op, tensor)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor]

    def reduce_scatter(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        check_reduce_op(op, tensor)
        return tensor

    def barrier(self) -> None:
        return None

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        self._check_src(src)
        return obj

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002
        return bool(decision)

    @staticmethod
    def _check_src(src: int) -> None:
        if src != 0:
            raise ValueError(f"source rank {src} does not exist in a one-process group")
