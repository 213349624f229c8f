"""The collective of a one-process run: every operation is the identity."""

from __future__ import annotations

from typing import Any, TypeVar

import torch

from runtime.collectives.base import Collective, CollectiveGroup
from runtime.collectives.rendezvous import Rendezvous

__all__ = ["SingleDeviceCollective"]

T = TypeVar("T")


class SingleDeviceCollective(Collective):
    """A group of one: results are what this process passed in.

    ``send``/``recv`` have no peer here: any ``src``/``dst`` is a misuse error. Asynchronous
    operations run at once and return a completed handle.
    """

    name = "single_device"

    def __init__(self) -> None:
        super().__init__()
        self._initialized = False

    @property
    def is_initialized(self) -> bool:
        return self._initialized

    def setup(self, rendezvous: Rendezvous) -> None:
        rank, world_size = rendezvous.rank, rendezvous.world_size
        if world_size != 1 or rank != 0:
            raise ValueError(
                f"the single_device collective holds one process, but was asked to join as rank "
                f"{rank} of {world_size}; a multi-process run needs the 'torch' collective"
            )
        self._initialized = True

    def teardown(self) -> None:
        self._initialized = False

    def _broadcast(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor:
        return tensor

    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        return tensor

    def _reduce(self, tensor: torch.Tensor, dst: int, op: str, group: CollectiveGroup) -> torch.Tensor:
        return tensor

    def _all_gather(self, tensor: torch.Tensor, group: CollectiveGroup) -> list[torch.Tensor]:
        return [tensor.clone()]

    def _gather(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> list[torch.Tensor] | None:
        return [tensor.clone()]

    def _scatter(
        self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None, src: int, group: CollectiveGroup
    ) -> torch.Tensor:
        assert scatter_list is not None  # checked: the only rank is the source
        return tensor.copy_(scatter_list[0])

    def _reduce_scatter(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        return tensor

    def _all_to_all(self, tensors: list[torch.Tensor], group: CollectiveGroup) -> list[torch.Tensor]:
        return [t.clone() for t in tensors]

    def _all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        output_splits: list[int],
        input_splits: list[int],
        group: CollectiveGroup,
    ) -> torch.Tensor:
        return output.copy_(input)

    def _barrier(self, group: CollectiveGroup) -> None:
        return None

    def _monitored_barrier(self, group: CollectiveGroup, timeout: float | None, wait_all_ranks: bool) -> None:
        return None  # the only rank has arrived

    def _broadcast_object(self, obj: T, src: int, group: CollectiveGroup) -> T:
        return obj

    def _all_gather_object(self, obj: Any, group: CollectiveGroup) -> list[Any]:
        return [obj]
