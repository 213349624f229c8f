"""The collective over Horovod (its Gloo controller on CPU; what ``horovod.torch`` offers).

Horovod's own operations are allreduce, allgather, broadcast, alltoall, reducescatter, barrier and
the object variants, on the whole job or on a *process set* (Horovod's subgroups). The rest of
the API is built from them with the same results as the torch collective: ``reduce`` is an
allreduce (the other ranks' buffers are unspecified by the contract), ``gather`` an allgather
kept on the destination, ``scatter`` a broadcast of the source's chunks of which each rank keeps
its own, ``all_to_all_single`` Horovod's alltoall with splits, the object gather and scatter an
object all-gather and broadcast. Asynchronous ``all_reduce``, ``broadcast``, ``all_gather``,
``all_to_all`` and ``all_to_all_single`` use Horovod's ``*_async`` functions (``poll`` and
``synchronize`` behind the handle); the other operations run at once and return a completed
handle. Horovod has no point-to-point messages (``send``, ``recv``, ``recv_any``, ``isend``,
``irecv``), no barrier that times out (``monitored_barrier``) and no bitwise reductions
(``band``, ``bor``, ``bxor``): those raise :class:`~runtime.collectives.errors.CollectiveNotSupportedError`.

Horovod itself is imported when the collective is set up, so this module loads without it.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch

from runtime.collectives.base import Collective, CollectiveGroup
from runtime.collectives.handles import CollectiveHandle
from runtime.collectives.rendezvous import Rendezvous
from runtime.errors import MissingDependencyError, RuntimeConfigError

__all__ = ["HorovodCollective", "import_horovod"]

T = TypeVar("T")

_POINT_TO_POINT = "Horovod has no point-to-point messages, only operations every rank of a process set joins"
_NO_MONITORED_BARRIER = (
    "Horovod's barrier has no timeout of its own and does not say which ranks are missing; use barrier() "
    "(the launch's timeout then names the ranks that hang, with their stacks)"
)
_NO_BITWISE = "Horovod reduces with Sum, Average, Min, Max, Product and Adasum only: it has no bitwise reductions"


def import_horovod() -> Any:
    """``horovod.torch``, or a :class:`MissingDependencyError` saying how to build it."""
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise MissingDependencyError("the horovod runtime", "horovod") from exc
    return hvd


class HorovodCollective(Collective):
    """Horovod's operations; subgroups are Horovod process sets (added dynamically)."""

    name = "horovod"
    title = "Horovod"
    setup_hint = (
        "run the work through strategy.launch(fn) with strategy='horovod', or call strategy.setup_environment() first"
    )
    unsupported_operations = {
        **dict.fromkeys(("send", "recv", "recv_any", "isend", "irecv"), _POINT_TO_POINT),
        "monitored_barrier": _NO_MONITORED_BARRIER,
    }
    unsupported_reduce_ops = dict.fromkeys(("band", "bor", "bxor"), _NO_BITWISE)

    def __init__(self) -> None:
        super().__init__()
        self._hvd: Any = None
        self._owns_init = False
        self._tensor_device = torch.device("cpu")
        self._process_sets: dict[tuple[int, ...], Any] = {}
        self._sequence: dict[tuple[int, ...], int] = {}

    @property
    def is_initialized(self) -> bool:
        return self._hvd is not None and bool(self._hvd.is_initialized())

    def setup(self, rendezvous: Rendezvous) -> None:
        """Join Horovod's job. The rendezvous comes from the variables ``horovodrun``/``horovod.run``
        set (``master_addr``/``master_port`` are not used); ``rank``/``world_size`` must match them."""
        rank, world_size, device, timeout = (
            rendezvous.rank,
            rendezvous.world_size,
            rendezvous.device,
            rendezvous.timeout,
        )
        hvd = import_horovod()
        if device is not None:
            self._tensor_device = device
        if timeout is not None:
            seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
            os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(max(1, int(seconds))))
        if not hvd.is_initialized():
            if "HOROVOD_RANK" not in os.environ and world_size > 1:
                raise RuntimeConfigError(
                    f"the horovod collective joins a job of {world_size} processes, but this process was not "
                    "started by horovodrun or horovod.run (HOROVOD_RANK is not set)",
                    hint="run the work through strategy.launch(fn) with strategy='horovod', or start the "
                    "script with `horovodrun -np <processes> --gloo python script.py`",
                )
            hvd.init(process_sets="dynamic")
            self._owns_init = True
        self._hvd = hvd
        if (hvd.rank(), hvd.size()) != (rank, world_size):
            found = (hvd.rank(), hvd.size())
            self.teardown()
            raise RuntimeConfigError(
                f"Horovod says this process is rank {found[0]} of {found[1]}, but the resolved config says "
                f"rank {rank} of {world_size}",
                hint="let horovodrun start as many processes as num_nodes x devices asks for",
            )
        self._rank, self._world_size = rank, world_size

    def teardown(self) -> None:
        if self._owns_init and self._hvd is not None and self._hvd.is_initialized():
            self._hvd.shutdown()
        self._owns_init = False
        self._process_sets.clear()
        self._sequence.clear()

    def _device(self) -> torch.device:
        return self._tensor_device

    # -- groups: Horovod process sets -------------------------------------------------------------

    def _new_group(self, ranks: tuple[int, ...]) -> Any:
        if len(ranks) == self._world_size:
            return self._hvd.global_process_set
        if ranks not in self._process_sets:
            self._process_sets[ranks] = self._hvd.add_process_set(list(ranks))
        return self._process_sets[ranks]

    def _set(self, group: CollectiveGroup) -> Any:
        return self._hvd.global_process_set if group.handle is None else group.handle

    def _on(self, group: CollectiveGroup, operation: str) -> dict[str, Any]:
        return {"name": self._name(operation, group), "process_set": self._set(group)}

    def _name(self, operation: str, group: CollectiveGroup) -> str:
        """A name every member gives this call alike. Horovod matches tensors across ranks by name,
        and its automatic names count every operation of the process, so a rank that also ran
        operations in a subgroup would name its next world operation differently and wait forever."""
        seq = self._sequence.get(group.ranks, 0)
        self._sequence[group.ranks] = seq + 1
        return f"runtime.{operation}.{'-'.join(map(str, group.ranks))}.{seq}"

    # -- primitives -------------------------------------------------------------------------------

    def _op(self, op: str) -> Any:
        hvd = self._hvd
        return {"sum": hvd.Sum, "mean": hvd.Average, "max": hvd.Max, "min": hvd.Min, "product": hvd.Product}[op]

    def _broadcast(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor:
        result = self._hvd.broadcast(tensor.contiguous(), root_rank=src, **self._on(group, "broadcast"))
        return tensor.copy_(result)

    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        result = self._hvd.allreduce(tensor.contiguous(), op=self._op(op), **self._on(group, "allreduce"))
        return tensor.copy_(result)

    def _reduce(self, tensor: torch.Tensor, dst: int, op: str, group: CollectiveGroup) -> torch.Tensor:
        return self._all_reduce(tensor, op, group)

    def _all_gather(self, tensor: torch.Tensor, group: CollectiveGroup) -> list[torch.Tensor]:
        stacked = self._hvd.allgather(tensor.contiguous().unsqueeze(0), **self._on(group, "allgather"))
        return [t.clone() for t in stacked.unbind(0)]

    def _gather(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> list[torch.Tensor] | None:
        gathered = self._all_gather(tensor, group)
        return gathered if self._rank == dst else None

    def _scatter(
        self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None, src: int, group: CollectiveGroup
    ) -> torch.Tensor:
        if scatter_list is not None:
            chunks = torch.stack([t.contiguous() for t in scatter_list])
        else:
            chunks = torch.empty((group.size, *tensor.shape), dtype=tensor.dtype, device=tensor.device)
        chunks = self._broadcast(chunks, src, group)
        return tensor.copy_(chunks[group.ranks.index(self._rank)])

    def _reduce_scatter(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        if op in ("sum", "mean"):
            return self._hvd.reducescatter(tensor.contiguous(), op=self._op(op), **self._on(group, "reducescatter"))
        # Horovod's reducescatter only sums or averages: reduce everything, keep this rank's chunk.
        reduced = self._all_reduce(tensor.clone(), op, group)
        return reduced.chunk(group.size)[group.ranks.index(self._rank)].clone()

    def _all_to_all(self, tensors: list[torch.Tensor], group: CollectiveGroup) -> list[torch.Tensor]:
        stacked = torch.stack([t.contiguous() for t in tensors])
        received = _output(self._hvd.alltoall(stacked, **self._on(group, "alltoall")))
        return [t.clone() for t in received.unbind(0)]

    def _all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        output_splits: list[int],
        input_splits: list[int],
        group: CollectiveGroup,
    ) -> torch.Tensor:
        received = self._hvd.alltoall(input.contiguous(), splits=_splits(input_splits), **self._on(group, "alltoall"))
        return output.copy_(_output(received))

    def _start(self, operation: str, *args: Any) -> CollectiveHandle[Any]:
        """Horovod's asynchronous functions where it has them; the other operations run now."""
        hvd = self._hvd
        if operation == "all_reduce":
            tensor, op, group = args
            handle = hvd.allreduce_async(tensor.contiguous(), op=self._op(op), **self._on(group, "allreduce"))
            return self._handle(operation, handle, tensor.copy_)
        if operation == "broadcast":
            tensor, src, group = args
            handle = hvd.broadcast_async(tensor.contiguous(), root_rank=src, **self._on(group, "broadcast"))
            return self._handle(operation, handle, tensor.copy_)
        if operation == "all_gather":
            tensor, group = args
            handle = hvd.allgather_async(tensor.contiguous().unsqueeze(0), **self._on(group, "allgather"))
            return self._handle(operation, handle, lambda stacked: [t.clone() for t in stacked.unbind(0)])
        if operation == "all_to_all":
            tensors, group = args
            handle = hvd.alltoall_async(torch.stack([t.contiguous() for t in tensors]), **self._on(group, "alltoall"))
            return self._handle(operation, handle, lambda got: [t.clone() for t in _output(got).unbind(0)])
        if operation == "all_to_all_single":
            output, source, _, input_splits, group = args
            handle = hvd.alltoall_async(
                source.contiguous(), splits=_splits(input_splits), **self._on(group, "alltoall")
            )
            return self._handle(operation, handle, lambda got: output.copy_(_output(got)))
        return super()._start(operation, *args)

    def _handle(self, operation: str, handle: Any, finish: Callable[[Any], T]) -> CollectiveHandle[T]:
        hvd = self._hvd
        return CollectiveHandle(operation, lambda: finish(hvd.synchronize(handle)), poll=lambda: bool(hvd.poll(handle)))

    def _barrier(self, group: CollectiveGroup) -> None:
        self._hvd.barrier(process_set=self._set(group))

    def _broadcast_object(self, obj: T, src: int, group: CollectiveGroup) -> T:
        result: T = self._hvd.broadcast_object(obj, root_rank=src, **self._on(group, "broadcast_object"))
        return result

    def _all_gather_object(self, obj: Any, group: CollectiveGroup) -> list[Any]:
        # Horovod's allgather_object has no process set: pickle, gather the lengths, then the
        # bytes padded to the longest.
        payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
        lengths = self._all_gather(torch.tensor(payload.numel(), dtype=torch.int64), group)
        padded = torch.zeros(int(max(lengths)), dtype=torch.uint8)
        padded[: payload.numel()] = payload
        gathered = self._all_gather(padded, group)
        return [pickle.loads(g[: int(n)].numpy().tobytes()) for g, n in zip(gathered, lengths, strict=True)]


def _splits(sizes: list[int]) -> torch.Tensor:
    """Split sizes as Horovod's alltoall takes them (int32, on the CPU)."""
    return torch.tensor(sizes, dtype=torch.int32)


def _output(received: Any) -> torch.Tensor:
    """alltoall's tensor: Horovod returns ``(tensor, received splits)`` where splits were given (and in
    some versions always)."""
    return received[0] if isinstance(received, tuple) else received
