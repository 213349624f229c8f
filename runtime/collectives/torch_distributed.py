"""The collective over ``torch.distributed`` (gloo on CPU, nccl on CUDA)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from runtime.collectives.base import Collective, CollectiveGroup
from runtime.errors import PortInUseError, RendezvousWaitError
from runtime.gloo_interface import SocketInterface, apply_gloo_interface
from runtime.launchers.reports import mark_as_echo, rendezvous_abandoned, rendezvous_may_be_abandoned
from runtime.ports import port_is_free
from runtime.rank_environment import rendezvous_timeout as default_rendezvous_timeout
from runtime.registry import register_collective

__all__ = ["TorchCollective"]

_log = logging.getLogger(__name__)

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


def import_group_default_modules() -> None:
    """Import, before any group exists, the modules that bind ``group.WORLD`` as a default argument.

    ``torch.distributed.nn.functional`` does so at import, and DistributedDataParallel imports it
    on first use. Imported while a group exists, it keeps that group alive past
    ``destroy_process_group``; the group's gloo worker threads then outlive it and can abort the
    process at interpreter exit (releasing Python tensors during finalization).
    A launcher that forks its ranks imports them once, before forking (if no group exists yet).
    """
    import torch.distributed.nn.functional  # noqa: F401


def _tcp_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"tcp://{host}:{port}"


_ARRIVED = "runtime-rendezvous/arrived-"
#: The longest sleep between two looks at the store while the launching process may give up.
_POLL = 0.05


def _rendezvous_store(address: str, port: int, rank: int, world_size: int, timeout: float) -> dist.TCPStore:
    """The run's key-value store: rank 0 hosts it, the others connect (retrying for ``timeout`` s)."""
    try:
        return dist.TCPStore(
            address, port, world_size, is_master=rank == 0, timeout=timedelta(seconds=timeout), wait_for_workers=False
        )
    except dist.DistError as exc:
        if rank == 0:
            if not port_is_free(port):
                raise PortInUseError(address, port, "MASTER_PORT") from exc
            raise
        # The client retried until the timeout: rank 0 never opened the store (or the address is wrong).
        error = RendezvousWaitError(rank, (0,), timeout, _tcp_url(address, port))
        mark_as_echo(error)
        raise error from exc


def _wait_for_every_rank(store: dist.TCPStore, rank: int, world_size: int, timeout: float, where: str) -> None:
    """Announce this rank in the store and wait (at most ``timeout`` s) until every rank has.

    gloo/nccl wait for their peers with the collective timeout; waiting here first bounds the
    rendezvous by its own timeout, and tells which ranks never came. In a rank process the store
    wakes the wait as soon as the last rank arrives. Where the rank runs in the launching process
    (the subprocess launcher's rank 0), the wait looks at the store at growing intervals (1 ms
    up to 50 ms) instead, so that it stops as soon as its launcher gave up on the launch
    (:func:`~runtime.launchers.reports.rendezvous_abandoned`: a peer failed or timed out).
    """
    store.set(f"{_ARRIVED}{rank}", "1")
    deadline = time.monotonic() + timeout
    waiting = [peer for peer in range(world_size) if peer != rank]
    if not rendezvous_may_be_abandoned():
        try:
            store.wait([f"{_ARRIVED}{peer}" for peer in waiting], timedelta(seconds=timeout))
            return
        except dist.DistError:  # the timeout, or rank 0 (the store's host) is gone
            pass
    pause = 0.001
    while True:
        waiting = [peer for peer in waiting if not _arrived(store, peer)]
        if not waiting:
            return
        if rendezvous_abandoned() or time.monotonic() >= deadline:
            error = RendezvousWaitError(rank, waiting, timeout, where)
            mark_as_echo(error)  # the peers it waited for are the cause, not this rank
            raise error
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, _POLL)


def _arrived(store: dist.TCPStore, peer: int) -> bool:
    try:
        return bool(store.check([f"{_ARRIVED}{peer}"]))
    except dist.DistError:
        return False


@register_collective("torch")
class TorchCollective(Collective):
    """``torch.distributed``'s default process group (gloo, nccl), and groups made from it.

    :meth:`setup` creates the group (rank 0 hosts the rendezvous store on ``master_port``); if a
    group already exists (made by the user), it is used and left in place at :meth:`teardown`.
    """

    name = "torch"
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
        rendezvous_timeout: float | None = None,
    ) -> None:
        """Join (or adopt) the default process group; see :meth:`Collective.setup`.

        The rendezvous is bounded by ``rendezvous_timeout`` (default: ``RUNTIME_RENDEZVOUS_TIMEOUT``,
        else 300 s), every later operation by ``timeout``: rank 0 hosts
        a ``TCPStore`` with the rendezvous timeout, every rank waits there until all have arrived
        (:func:`_wait_for_every_rank`), and only then joins gloo/nccl with the collective timeout.
        """
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
        store = _rendezvous_store(master_addr, master_port, rank, world_size, rendezvous_timeout)
        _wait_for_every_rank(store, rank, world_size, rendezvous_timeout, _tcp_url(master_addr, master_port))
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, **kwargs)
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


    def _device(self) -> torch.device:
        return self._tensor_device

    def _new_group(self, ranks: tuple[int, ...]) -> Any:
        return dist.new_group(list(ranks))  # its own communicator, even for every rank

    def _broadcast(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor:
        return _in_place(tensor, lambda t: dist.broadcast(t, src, group=group.handle))

    def _all_reduce(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        _in_place(tensor, lambda t: dist.all_reduce(t, op=_REDUCE_OPS[op], group=group.handle))
        if op == "mean":
            tensor.div_(group.size)
        return tensor

    def _reduce(self, tensor: torch.Tensor, dst: int, op: str, group: CollectiveGroup) -> torch.Tensor:
        _in_place(tensor, lambda t: dist.reduce(t, dst, op=_REDUCE_OPS[op], group=group.handle))
        if op == "mean" and self.rank == dst:
            tensor.div_(group.size)
        return tensor

    def _all_gather(self, tensor: torch.Tensor, group: CollectiveGroup) -> list[torch.Tensor]:
        tensor = tensor.contiguous()
        gathered = [torch.empty_like(tensor) for _ in range(group.size)]
        dist.all_gather(gathered, tensor, group=group.handle)
        return gathered

    def _gather(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> list[torch.Tensor] | None:
        tensor = tensor.contiguous()
        if self.rank != dst:
            dist.gather(tensor, None, dst, group=group.handle)
            return None
        gathered = [torch.empty_like(tensor) for _ in range(group.size)]
        dist.gather(tensor, gathered, dst, group=group.handle)
        return gathered

    def _scatter(
        self, tensor: torch.Tensor, scatter_list: list[torch.Tensor] | None, src: int, group: CollectiveGroup
    ) -> torch.Tensor:
        chunks = None if scatter_list is None else [t.contiguous() for t in scatter_list]
        return _in_place(tensor, lambda t: dist.scatter(t, chunks, src, group=group.handle))

    def _reduce_scatter(self, tensor: torch.Tensor, op: str, group: CollectiveGroup) -> torch.Tensor:
        chunks = [chunk.contiguous() for chunk in tensor.chunk(group.size)]
        output = torch.empty_like(chunks[0])
        dist.reduce_scatter(output, chunks, op=_REDUCE_OPS[op], group=group.handle)
        if op == "mean":
            output.div_(group.size)
        return output

    def _all_to_all(self, tensors: list[torch.Tensor], group: CollectiveGroup) -> list[torch.Tensor]:
        inputs = [t.contiguous() for t in tensors]
        outputs = [torch.empty_like(t) for t in inputs]
        dist.all_to_all(outputs, inputs, group=group.handle)
        return outputs

    def _send(self, tensor: torch.Tensor, dst: int, group: CollectiveGroup) -> None:
        dist.send(tensor.contiguous(), dst, group=group.handle)

    def _recv(self, tensor: torch.Tensor, src: int, group: CollectiveGroup) -> torch.Tensor:
        return _in_place(tensor, lambda t: dist.recv(t, src, group=group.handle))

    def _barrier(self, group: CollectiveGroup) -> None:
        if self._backend == "nccl" and self._tensor_device.type == "cuda":
            dist.barrier(group=group.handle, device_ids=[self._tensor_device.index or 0])
        else:
            dist.barrier(group=group.handle)

    def _broadcast_object(self, obj: T, src: int, group: CollectiveGroup) -> T:
        holder: list[Any] = [obj if self.rank == src else None]
        dist.broadcast_object_list(holder, src, group=group.handle)
        return holder[0]

    def _all_gather_object(self, obj: Any, group: CollectiveGroup) -> list[Any]:
        gathered: list[Any] = [None] * group.size
        dist.all_gather_object(gathered, obj, group=group.handle)
        return gathered


def _in_place(tensor: torch.Tensor, operation: Callable[[torch.Tensor], object]) -> torch.Tensor:
    """Run ``operation`` on ``tensor`` in place; engines need contiguous memory, so a strided view
    is worked on as a contiguous copy and written back."""
    if tensor.is_contiguous():
        operation(tensor)
        return tensor
    buffer = tensor.contiguous()
    operation(buffer)
    return tensor.copy_(buffer)
