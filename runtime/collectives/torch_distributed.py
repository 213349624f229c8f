"""The collective over ``torch.distributed`` (gloo on CPU, nccl on CUDA)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from runtime.collectives.base import Collective, ReduceOp, check_reduce_op
from runtime.errors import PortInUseError
from runtime.ports import port_is_free
from runtime.registry import register_collective

__all__ = ["TorchCollective"]

T = TypeVar("T")

_REDUCE_OPS: dict[str, dist.ReduceOp.RedOpType] = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,  # divided by world_size afterwards: gloo has no AVG
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


def _as_timedelta(timeout: timedelta | float | None) -> timedelta | None:
    if timeout is None or isinstance(timeout, timedelta):
        return timeout
    return timedelta(seconds=float(timeout))


def _import_group_default_modules() -> None:
    """Import, before any group exists, the modules that bind ``group.WORLD`` as a default argument.

    ``torch.distributed.nn.functional`` does so at import, and DistributedDataParallel imports it
    on first use. Imported while a group exists, it keeps that group alive past
    ``destroy_process_group``; the group's gloo worker threads then outlive it and can abort the
    process at interpreter exit (releasing Python tensors during finalization).
    """
    import torch.distributed.nn.functional  # noqa: F401


def _tcp_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"tcp://{host}:{port}"


@register_collective("torch")
class TorchCollective(Collective):
    """``torch.distributed``'s default process group.

    :meth:`setup` creates the group (rank 0 hosts the rendezvous store on ``master_port``); if a
    group already exists (made by the user), it is used and left in place at :meth:`teardown`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._owns_group = False
        self._backend: str | None = None
        self._tensor_device = torch.device("cpu")

    @property
    def is_initialized(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    @property
    def backend(self) -> str | None:
        """The process group's backend (``gloo``, ``nccl``) once set up."""
        return self._backend

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
        if not dist.is_available():
            raise RuntimeError("this torch build has no torch.distributed support")
        if device is not None:
            self._tensor_device = device
        if dist.is_initialized():
            if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
                raise RuntimeError(
                    f"a process group already exists as rank {dist.get_rank()} of "
                    f"{dist.get_world_size()}, but this process should be rank {rank} of {world_size}"
                )
            self._adopt(owns=False)
            return
        if master_port is None:
            raise ValueError("TorchCollective.setup needs master_port (the rendezvous port)")
        _import_group_default_modules()
        kwargs: dict[str, Any] = {}
        pg_timeout = _as_timedelta(timeout)
        if pg_timeout is not None:
            kwargs["timeout"] = pg_timeout
        try:
            dist.init_process_group(
                backend=backend,
                init_method=_tcp_url(master_addr, master_port),
                rank=rank,
                world_size=world_size,
                **kwargs,
            )
        except dist.DistNetworkError as exc:
            if rank == 0 and not port_is_free(master_port):
                raise PortInUseError(master_addr, master_port, "MASTER_PORT") from exc
            raise
        self._adopt(owns=True)

    def _adopt(self, *, owns: bool) -> None:
        self._owns_group = owns
        self._rank = dist.get_rank()
        self._world_size = dist.get_world_size()
        self._backend = str(dist.get_backend())

    def teardown(self) -> None:
        if self._owns_group and self.is_initialized:
            dist.destroy_process_group()
        self._owns_group = False

    def _require_group(self) -> None:
        if not self.is_initialized:
            raise RuntimeError(
                "the torch collective is not set up: run the work through strategy.launch(fn) / "
                "runtime.launch(fn), or call strategy.setup_environment() first"
            )

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        self._require_group()
        dist.broadcast(tensor, src)
        return tensor

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        self._require_group()
        check_reduce_op(op, tensor)
        dist.all_reduce(tensor, op=_REDUCE_OPS[op])
        if op == "mean":
            tensor.div_(self.world_size)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        self._require_group()
        tensor = tensor.contiguous()
        gathered = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(gathered, tensor)
        return gathered

    def reduce_scatter(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        self._require_group()
        check_reduce_op(op, tensor)
        if tensor.dim() == 0 or tensor.shape[0] % self.world_size:
            raise ValueError(
                f"reduce_scatter splits dimension 0 into {self.world_size} equal chunks, "
                f"but the tensor has shape {tuple(tensor.shape)}"
            )
        chunks = [chunk.contiguous() for chunk in tensor.chunk(self.world_size)]
        output = torch.empty_like(chunks[0])
        dist.reduce_scatter(output, chunks, op=_REDUCE_OPS[op])
        if op == "mean":
            output.div_(self.world_size)
        return output

    def barrier(self) -> None:
        self._require_group()
        if self._backend == "nccl" and self._tensor_device.type == "cuda":
            dist.barrier(device_ids=[self._tensor_device.index or 0])
        else:
            dist.barrier()

    def broadcast_object(self, obj: T, src: int = 0) -> T:
        self._require_group()
        holder: list[Any] = [obj if self.rank == src else None]
        dist.broadcast_object_list(holder, src)
        return holder[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        self._require_group()
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def _device(self) -> torch.device:
        return self._tensor_device
