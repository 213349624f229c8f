"""How the torch collective's ranks meet: rank 0's ``TCPStore``, and a bounded wait for every rank there."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch.distributed as dist

from runtime._protocol.ports import handed_store_socket, port_is_free
from runtime._protocol.rank_environment import AGENT_STORE_VARIABLE
from runtime._protocol.rank_files import mark_as_echo, rendezvous_abandoned, rendezvous_may_be_abandoned
from runtime.errors import PortInUseError, RendezvousWaitError

__all__ = ["import_group_default_modules", "rendezvous_store", "tcp_url", "wait_for_every_rank"]


def import_group_default_modules() -> None:
    """Import, before any group exists, the modules that bind ``group.WORLD`` as a default argument.

    ``torch.distributed.nn.functional`` does so at import, and DistributedDataParallel imports it
    on first use. Imported while a group exists, it keeps that group alive past
    ``destroy_process_group``; the group's gloo worker threads then outlive it and can abort the
    process at interpreter exit (releasing Python tensors during finalization).
    A launcher that forks its ranks imports them once, before forking (if no group exists yet).
    """
    import torch.distributed.nn.functional  # noqa: F401


def tcp_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"tcp://{host}:{port}"


_KEYS = "runtime-rendezvous/"
#: The longest sleep between two looks at the store while the launching process may give up.
_POLL = 0.05


def rendezvous_store(address: str, port: int, rank: int, world_size: int, timeout: float) -> dist.TCPStore:
    """The run's key-value store: rank 0 hosts it, the others connect (retrying for ``timeout`` s).

    Rank 0 serves on the socket its launcher has listened on since before any rank started, where
    the launcher did (:mod:`runtime._protocol.ports`): then no peer is refused and backs off.
    """
    # Under torch's agent (torchrun, or resolver run's nodes that restart together) the agent hosts it.
    hosts = rank == 0 and os.environ.get(AGENT_STORE_VARIABLE) != "True"
    listening = handed_store_socket(port) if hosts else None
    try:
        return dist.TCPStore(
            address, port, world_size, is_master=hosts, timeout=timedelta(seconds=timeout), wait_for_workers=False,
            master_listen_fd=listening,
        )  # fmt: skip
    except dist.DistError as exc:
        if hosts:
            if not port_is_free(port):
                raise PortInUseError(address, port, "MASTER_PORT") from exc
            raise
        # The client retried until the timeout: rank 0 never opened the store (or the address is wrong).
        error = RendezvousWaitError(rank, (0,), timeout, tcp_url(address, port))
        mark_as_echo(error)
        raise error from exc


def wait_for_every_rank(
    store: dist.Store, rank: int, world_size: int, timeout: float, where: str, stage: str = "arrived"
) -> None:
    """Announce this rank in the store and wait (at most ``timeout`` s) until every rank has.

    ``stage`` names what the ranks wait for each other to have done (its own keys in the store).

    gloo/nccl wait for their peers with the collective timeout; waiting here first bounds the
    rendezvous by its own timeout, and tells which ranks never came. In a rank process the store
    wakes the wait as soon as the last rank arrives. Where the rank runs in the launching process
    (the subprocess launcher's rank 0), the wait looks at the store at growing intervals (1 ms
    up to 50 ms) instead, so that it stops as soon as its launcher gave up on the launch
    (:func:`~runtime._protocol.rank_files.rendezvous_abandoned`: a peer failed or timed out).
    """
    key = f"{_KEYS}{stage}-"
    store.set(f"{key}{rank}", "1")
    deadline = time.monotonic() + timeout
    waiting = [peer for peer in range(world_size) if peer != rank]
    if not rendezvous_may_be_abandoned():
        try:
            store.wait([f"{key}{peer}" for peer in waiting], timedelta(seconds=timeout))
            return
        except dist.DistError:  # the timeout, or rank 0 (the store's host) is gone
            pass
    pause = 0.001
    while True:
        waiting = [peer for peer in waiting if not _has_key(store, f"{key}{peer}")]
        if not waiting:
            return
        if rendezvous_abandoned() or time.monotonic() >= deadline:
            error = RendezvousWaitError(rank, waiting, timeout, where)
            mark_as_echo(error)  # the peers it waited for are the cause, not this rank
            raise error
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, _POLL)


def _has_key(store: dist.Store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except dist.DistError:
        return False
