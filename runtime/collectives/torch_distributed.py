"""The collective over ``torch.distributed`` (gloo on CPU, nccl on CUDA)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from runtime._gloo_interface import SocketInterface, apply_gloo_interface, host_addresses
from runtime._protocol.peers import announcement, remember_hosts, remember_store
from runtime._protocol.rank_environment import rendezvous_timeout as default_rendezvous_timeout
from runtime._protocol.rank_files import mark_as_echo
from runtime.collectives.base import Collective, CollectiveGroup
from runtime.collectives.errors import BarrierTimeoutError, CollectiveNotSupportedError
from runtime.collectives.handles import CollectiveHandle
from runtime.collectives.rendezvous import Rendezvous
from runtime.collectives.torch_rendezvous import (
    import_group_default_modules,
    rendezvous_store,
    tcp_url,
    wait_for_every_rank,
)

__all__ = ["TorchCollective", "import_group_default_modules"]

_log = logging.getLogger(__name__)
_HOSTS = "runtime-rendezvous/host-"

T = TypeVar("T")

_REDUCE_OPS: dict[str, dist.ReduceOp.RedOpType] = {
    "sum": dist.ReduceOp.SUM,
    "mean": dist.ReduceOp.SUM,  # divided by the group's size afterwards: gloo has no AVG for every operation
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
}
_BITWISE = ("band", "bor", "bxor")


def _as_timedelta(timeout: timedelta | float | None) -> timedelta | None:
    if timeout is None or isinstance(timeout, timedelta):
        return timeout
    return timedelta(seconds=float(timeout))


class TorchCollective(Collective):
    """``torch.distributed``'s default process group (gloo, nccl), and groups made from it.

    :meth:`setup` creates the group (rank 0 hosts the rendezvous store on ``master_port``); if a
    group already exists (made by the user), it is used and left in place at :meth:`teardown`.
    """

    name = "torch"
    title = "torch.distributed"
    setup_hint = (
        "run the work through strategy.launch(fn) / runtime.launch(fn), or call strategy.setup_environment() first"
    )

    def __init__(self) -> None:
        super().__init__()
        self._owns_group = False
        self._backend: str | None = None
        self._tensor_device = torch.device("cpu")
        #: The interface this rank told gloo to bind to (``GLOO_SOCKET_IFNAME``), where it chose one.
        self.socket_interface: SocketInterface | None = None

    @property
    def is_initialized(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    @property
    def backend(self) -> str | None:
        """The process group's backend (``gloo``, ``nccl``) once set up."""
        return self._backend

    def setup(self, rendezvous: Rendezvous) -> None:
        """Join (or adopt) the default process group; see :meth:`Collective.setup`.

        The rendezvous is bounded by ``rendezvous_timeout`` (default: ``RUNTIME_RENDEZVOUS_TIMEOUT``,
        else 300 s), every later operation by ``timeout``: rank 0 hosts
        a ``TCPStore`` with the rendezvous timeout, every rank waits there until all have arrived
        (:func:`~runtime.collectives.torch_rendezvous.wait_for_every_rank`), and only then joins gloo/nccl
        with the collective timeout.
        """
        rank, world_size, backend = rendezvous.rank, rendezvous.world_size, rendezvous.backend
        master_addr, master_port, device = rendezvous.master_addr, rendezvous.master_port, rendezvous.device
        timeout, rendezvous_timeout = rendezvous.timeout, rendezvous.rendezvous_timeout
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
        import_group_default_modules()
        kwargs: dict[str, Any] = {}
        pg_timeout = _as_timedelta(timeout)
        if pg_timeout is not None:
            kwargs["timeout"] = pg_timeout
        if rendezvous_timeout is None:
            rendezvous_timeout = default_rendezvous_timeout()
        if backend == "gloo":
            # Before anything waits: a main address this host cannot reach is an error here, and gloo
            # binds to the interface that reaches it rather than to whatever the host's name resolves to.
            self.socket_interface = apply_gloo_interface(master_addr)
            if self.socket_interface is not None:
                _log.info("rank %d: %s", rank, self.socket_interface.describe())
        store: dist.Store = (
            rendezvous_store(master_addr, master_port, rank, world_size, rendezvous_timeout)
            if rendezvous.store is None
            else rendezvous.store  # where the ranks already met (resolver check's store)
        )
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        if attempt is not None:
            # torchrun's agent hosts the store and keeps it across restarts: an attempt's keys (arrivals,
            # gloo's addresses) under their own prefix, as torch's env:// rendezvous does, or a restarted
            # rank reads the dead attempt's.
            store = dist.PrefixStore(f"/worker/attempt_{attempt}", store)
        where = tcp_url(master_addr, master_port)
        # Where each rank runs, announced before arriving: a peer that vanishes is named by its host.
        store.set(f"{_HOSTS}{rank}", announcement(host_addresses()))
        wait_for_every_rank(store, rank, world_size, rendezvous_timeout, where)
        remember_hosts(dict(enumerate(store.multi_get([f"{_HOSTS}{peer}" for peer in range(world_size)]))))
        remember_store(store)  # where a rank whose work returned says so (runtime.strategies.guard reads it)
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, **kwargs)
        # gloo returns from joining once this rank's connections are made, while a peer may still be
        # making its own: a rank that then left at once (work without a collective) failed that peer's
        # connectFullMesh ("Connection closed by peer"). Every rank leaves the rendezvous together.
        wait_for_every_rank(store, rank, world_size, rendezvous_timeout, where, stage="connected")
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
        remember_store(None)

    def _device(self) -> torch.device:
        return self._tensor_device

    def _reduce_op_unsupported(self, op: str) -> str | None:
        if op in _BITWISE and self._backend == "nccl":
            return "NCCL has no bitwise reductions (torch.distributed's nccl backend refuses BAND, BOR and BXOR)"
        return super()._reduce_op_unsupported(op)

    def _new_group(self, ranks: tuple[int, ...]) -> Any:
        return dist.new_group(list(ranks))  # its own communicator, even for every rank

    def _start(self, operation: str, *args: Any) -> CollectiveHandle[Any]:
        handle: CollectiveHandle[Any] = getattr(self, f"_{operation}")(*args, async_op=True)
        return handle

    def _broadcast(self, tensor: torch.Tensor, src: int, group: CollectiveGroup, async_op: bool = False) -> Any:
        return _in_place("broadcast", tensor, lambda t: dist.broadcast(t, src, group=group.handle, async_op=async_op))

    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup, async_op: bool = False) -> Any:
        def run(t: torch.Tensor) -> Any:
            return dist.all_reduce(t, op=_REDUCE_OPS[op], group=group.handle, async_op=async_op)

        return _in_place("all_reduce", tensor, run, _mean(op, group.size))

    def _reduce(self, tensor: torch.Tensor, dst: int, op: str, group: CollectiveGroup, async_op: bool = False) -> Any:
        def run(t: torch.Tensor) -> Any:
            return dist.reduce(t, dst, op=_REDUCE_OPS[op], group=group.handle, async_op=async_op)

        return _in_place("reduce", tensor, run, _mean(op if self.rank == dst else "sum", group.size))

    def _all_gather(self, tensor: torch.Tensor, group: CollectiveGroup, async_op: bool = False) -> Any:
        tensor = tensor.contiguous()
        gathered = [torch.empty_like(tensor) for _ in range(group.size)]
        work = dist.all_gather(gathered, tensor, group=group.handle, async_op=async_op)
        return _done("all_gather", work, lambda: gathered)

    def _gather(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup, async_op: bool = False) -> Any:
        tensor = tensor.contiguous()
        gathered = [torch.empty_like(tensor) for _ in range(group.size)] if self.rank == dst else None
        work = dist.gather(tensor, gathered, dst, group=group.handle, async_op=async_op)
        return _done("gather", work, lambda: gathered)

    def _scatter(
        self,
        tensor: torch.Tensor,
        scatter_list: list[torch.Tensor] | None,
        src: int,
        group: CollectiveGroup,
        async_op: bool = False,
    ) -> Any:
        chunks = None if scatter_list is None else [t.contiguous() for t in scatter_list]
        return _in_place(
            "scatter", tensor, lambda t: dist.scatter(t, chunks, src, group=group.handle, async_op=async_op)
        )

    def _reduce_scatter(self, tensor: torch.Tensor, op: str, group: CollectiveGroup, async_op: bool = False) -> Any:
        chunks = [chunk.contiguous() for chunk in tensor.chunk(group.size)]
        output = torch.empty_like(chunks[0])
        work = dist.reduce_scatter(output, chunks, op=_REDUCE_OPS[op], group=group.handle, async_op=async_op)
        finish = _mean(op, group.size)
        return _done("reduce_scatter", work, lambda: finish(output) if finish else output)

    def _all_to_all(self, tensors: list[torch.Tensor], group: CollectiveGroup, async_op: bool = False) -> Any:
        inputs = [t.contiguous() for t in tensors]
        outputs = [torch.empty_like(t) for t in inputs]
        work = dist.all_to_all(outputs, inputs, group=group.handle, async_op=async_op)
        return _done("all_to_all", work, lambda: outputs)

    def _all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,  # noqa: A002
        output_splits: list[int],
        input_splits: list[int],
        group: CollectiveGroup,
        async_op: bool = False,
    ) -> Any:
        source = input.contiguous()

        def run(t: torch.Tensor) -> Any:
            return dist.all_to_all_single(t, source, output_splits, input_splits, group=group.handle, async_op=async_op)

        return _in_place("all_to_all_single", output, run)

    def _send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup, tag: int) -> None:
        dist.send(tensor.contiguous(), dst, group=group.handle, tag=tag)

    def _recv(self, tensor: torch.Tensor, src: int | None, group: CollectiveGroup, tag: int) -> int:
        buffer = tensor if tensor.is_contiguous() else tensor.contiguous()
        sender = dist.recv(buffer, src, group=group.handle, tag=tag)
        if buffer is not tensor:
            tensor.copy_(buffer)
        return int(sender)

    def _isend(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup, tag: int) -> CollectiveHandle[None]:
        work = dist.isend(tensor.contiguous(), dst, group=group.handle, tag=tag)
        return CollectiveHandle.of_work("isend", work, lambda: None)

    def _irecv(
        self, tensor: torch.Tensor, src: int, group: CollectiveGroup, tag: int
    ) -> CollectiveHandle[torch.Tensor]:
        return _in_place("irecv", tensor, lambda t: dist.irecv(t, src, group=group.handle, tag=tag), handle=True)

    def _barrier(self, group: CollectiveGroup, async_op: bool = False) -> Any:
        if self._backend == "nccl" and self._tensor_device.type == "cuda":
            work = dist.barrier(group=group.handle, async_op=async_op, device_ids=[self._tensor_device.index or 0])
        else:
            work = dist.barrier(group=group.handle, async_op=async_op)
        return _done("barrier", work, lambda: None)

    def _monitored_barrier(self, group: CollectiveGroup, timeout: float | None, wait_all_ranks: bool) -> None:
        if self._backend != "gloo":
            raise CollectiveNotSupportedError(
                self.name,
                "monitored_barrier",
                f"torch.distributed has it on gloo only, and this group runs {self._backend}",
                hint="use barrier(), or a gloo group (new_group does not change the backend)",
            )
        limit = None if timeout is None else timedelta(seconds=timeout)
        try:
            dist.monitored_barrier(group=group.handle, timeout=limit, wait_all_ranks=wait_all_ranks)
        except RuntimeError as exc:
            raise _barrier_timeout(exc, self.rank, group, timeout) from exc

    def _broadcast_object(self, obj: T, src: int, group: CollectiveGroup) -> T:
        holder: list[Any] = [obj if self.rank == src else None]
        dist.broadcast_object_list(holder, src, group=group.handle)
        return holder[0]

    def _all_gather_object(self, obj: Any, group: CollectiveGroup) -> list[Any]:
        gathered: list[Any] = [None] * group.size
        dist.all_gather_object(gathered, obj, group=group.handle)
        return gathered

    def _gather_object(self, obj: Any, dst: int, group: CollectiveGroup) -> list[Any] | None:
        gathered: list[Any] | None = [None] * group.size if self.rank == dst else None
        dist.gather_object(obj, gathered, dst=dst, group=group.handle)
        return gathered

    def _scatter_object(self, objects: list[Any] | None, src: int, group: CollectiveGroup) -> Any:
        received: list[Any] = [None]
        dist.scatter_object_list(received, objects if self.rank == src else None, src=src, group=group.handle)
        return received[0]


def _mean(op: str, size: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """What turns a sum into the mean (gloo has no AVG for every operation), or None."""
    return (lambda t: t.div_(size)) if op == "mean" else None


def _done(operation: str, work: Any, finish: Callable[[], T]) -> Any:
    """The result (``work`` is None: the call was synchronous), or a handle that finishes on ``wait()``."""
    return finish() if work is None else CollectiveHandle.of_work(operation, work, finish)


def _in_place(
    operation: str,
    tensor: torch.Tensor,
    run: Callable[[torch.Tensor], Any],
    after: Callable[[torch.Tensor], torch.Tensor] | None = None,
    *,
    handle: bool = False,
) -> Any:
    """Run ``run`` on ``tensor`` in place; engines need contiguous memory, so a strided view is worked
    on as a contiguous copy and written back (when the work is done, for an asynchronous one)."""
    buffer = tensor if tensor.is_contiguous() else tensor.contiguous()
    work = run(buffer)

    def finish() -> torch.Tensor:
        if buffer is not tensor:
            tensor.copy_(buffer)
        if after is not None:
            after(tensor)
        return tensor

    if handle:
        return CollectiveHandle.of_work(operation, work, finish)
    return _done(operation, work, finish)


_MISSING_RANKS = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


def _barrier_timeout(exc: RuntimeError, rank: int, group: CollectiveGroup, timeout: float | None) -> BaseException:
    """gloo's monitored-barrier failure, as a :class:`BarrierTimeoutError` naming global ranks."""
    found = _MISSING_RANKS.search(str(exc))
    if found:  # the group's first rank: gloo names the group ranks that did not arrive
        missing = [group.ranks[int(r)] for r in found.group(1).replace(" ", "").split(",") if r]
        error = BarrierTimeoutError(rank, timeout, missing)
    elif rank != group.ranks[0]:
        # gloo says "received errors while waiting for rank 0", or that rank 0 closed the connection
        # (it does once it gave up on the missing ranks): either way rank 0 never confirmed.
        error = BarrierTimeoutError(rank, timeout, first=group.ranks[0])
    else:
        return exc
    mark_as_echo(error)  # the ranks that did not come are the cause (the launcher blames them)
    return error
