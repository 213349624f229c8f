"""Check step 1: reach rank 0's ``main_address:main_port`` and meet every rank in its TCPStore.

The store is the rendezvous the real job uses (rank 0 hosts it, the others connect); the check
then carries its own exchange (facts, results) through it, which needs no collective backend.
Before a rank connects, a plain TCP connection tells *why* it cannot (no route, refused,
filtered, a name that does not resolve), so the failure names this host, the address tried and
the likely fix instead of a client that retries until the timeout.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from runtime._gloo_interface import choose_gloo_interface
from runtime._protocol.ports import host_holds, port_is_free
from runtime.preflight.report import FAIL, OK, Check

__all__ = ["RendezvousFailed", "meet"]

ARRIVED = "check/arrived/"
GO = "check/go"


class RendezvousFailed(Exception):
    """This rank could not take part; ``check`` says why (and ``store`` is what it still has)."""

    def __init__(self, check: Check, store: Any = None) -> None:
        super().__init__(check.detail)
        self.check = check
        self.store = store


def _fail(detail: str, fix: str, rank: int, *, echo: bool = False, blame: tuple[int, ...] | None = None) -> Check:
    host = socket.gethostname()
    blamed = (rank,) if blame is None else blame
    return Check("rendezvous", FAIL, detail, blamed, [host] * len(blamed), fix=fix, echo=echo)


def _why_unreachable(address: str, port: int, deadline: float, rank: int, source: str) -> Check | None:
    """Try a plain TCP connection to rank 0 until it works or ``deadline``; None once it works."""
    host = socket.gethostname()
    where = f"{address}:{port} (from {source})"
    try:
        choose_gloo_interface(address, {})  # resolves the name and finds a route, or says why not
    except Exception as exc:  # RuntimeConfigError, with this host and the address in its message
        text, hint = getattr(exc, "message", str(exc)), getattr(exc, "hint", None)
        return _fail(f"rank {rank} on {host}: {text}", hint or "set MASTER_ADDR to an address of rank 0's host", rank)
    last: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((address, port), timeout=min(left, 2.0)):
                return None
        except OSError as exc:
            last = exc
            if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                break  # no route now will not be one in a second
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    if last is not None and last.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        detail = f"rank {rank} on {host} cannot reach {where}: {last.strerror}"
        fix = "MASTER_ADDR must be an address of rank 0's host that this host can route to (check `ip route get`)"
    elif last is not None and last.errno == errno.ECONNREFUSED:
        detail = f"rank {rank} on {host}: nothing listens at {where} (connection refused until the timeout)"
        fix = ("rank 0 did not open the rendezvous (see its line), or MASTER_ADDR names another machine "
               "than rank 0's: set it to rank 0's host")  # fmt: skip
    else:
        why = "no answer" if last is None or isinstance(last, TimeoutError) else (last.strerror or str(last))
        detail = f"rank {rank} on {host}: connecting to {where} timed out ({why})"
        fix = f"a firewall may drop port {port} between the hosts, or MASTER_ADDR is not rank 0's host: open the port or fix the address"  # noqa: E501
    return _fail(detail, fix, rank)


def _why_not_host(address: str) -> Check | None:
    """Rank 0's failure when the main address does not resolve here (torch's store would retry
    resolving it until the timeout, twice); None otherwise."""
    try:
        socket.getaddrinfo(address.strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        host = socket.gethostname()
        why = getattr(exc, "strerror", None) or str(exc)
        return _fail(f"rank 0 on {host}: this host cannot resolve the main address '{address}' ({why}), so rank 0 "
                     "cannot host the rendezvous there", f"set MASTER_ADDR (or --master-addr) to rank 0's host "
                     f"({host}) or one of its addresses", 0)  # fmt: skip
    return None


def _port_fix(port: int, source: str) -> str:
    """The fix for a main port that something other than this job's rank 0 answers, by where it came from."""
    if source == "MASTER_PORT":
        return (f"another program (or another run) holds port {port} on rank 0's host: set MASTER_PORT to a free "
                "port, or unset it where the launcher picks the job's own (srun, mpirun, resolver run)")  # fmt: skip
    if source == "master_port":
        return f"another program (or another run) holds port {port} on rank 0's host: pass a free --master-port"
    return (f"another program (or another run) holds port {port} on rank 0's host: set MASTER_PORT to a free "
            "port, or stop what holds it")  # fmt: skip


def _foreign(address: str, port: int, rank: int, source: str, what: str) -> RendezvousFailed:
    """This rank's verdict on a main port that another program answers. It blames no rank: the fault is
    the port's (rank 0, which cannot listen there, or a rank 0 elsewhere, names its side in the report)."""
    host = socket.gethostname()
    return RendezvousFailed(_fail(
        f"rank {rank} on {host}: {address}:{port} (from {source}) is answered by something that is not this "
        f"job's rank 0: {what}", _port_fix(port, source), rank, blame=()))  # fmt: skip


def _client(address: str, port: int, world_size: int, timeout: float, rank: int, source: str) -> dist.TCPStore:
    """A rank's store client, within ``timeout``: torch's client waits without end for the first answer
    of whatever accepted its connection (a foreign listener that stays silent, a host that vanished),
    so it connects in a daemon thread that this rank leaves behind (it ends with the process)."""
    made: list[dist.TCPStore] = []
    failed: list[BaseException] = []

    def connect() -> None:
        try:
            made.append(dist.TCPStore(address, port, world_size, is_master=False,
                                      timeout=timedelta(seconds=timeout), wait_for_workers=False))  # fmt: skip
        except BaseException as exc:  # handed to the rank's thread, which says what it means
            failed.append(exc)

    thread = threading.Thread(target=connect, name=f"check-store-{address}:{port}", daemon=True)
    thread.start()
    thread.join(timeout + 2.0)  # torch's own retries end about a second after its timeout
    if made:
        return made[0]
    if failed:
        raise failed[0]
    silence = f"it accepted the connection but sent nothing a rendezvous store sends in {timeout:.1f} s"
    raise _foreign(address, port, rank, source, silence)


def _store(address: str, port: int, rank: int, world_size: int, timeout: float, source: str) -> dist.TCPStore:
    host = socket.gethostname()
    try:
        if rank != 0:
            return _client(address, port, world_size, timeout, rank, source)
        return dist.TCPStore(address, port, world_size, is_master=True,
                             timeout=timedelta(seconds=timeout), wait_for_workers=False)  # fmt: skip
    except (dist.DistError, RuntimeError, OSError) as exc:
        if rank == 0 and not port_is_free(port):
            raise RendezvousFailed(_fail(
                f"rank 0 on {host} cannot listen on port {port} (from {source}): another process uses it",
                "pick a free port (MASTER_PORT, or --master-port), or stop what holds it (`ss -ltnp sport = :"
                f"{port}`)", rank)) from None  # fmt: skip
        if rank == 0 and not host_holds(address):
            raise RendezvousFailed(_fail(
                f"rank 0 on {host}: the main address {address} is not an address of this host, "
                "so rank 0 cannot host the rendezvous there (the other ranks look for rank 0 on that machine)",
                f"set MASTER_ADDR (or --master-addr) to rank 0's host ({host}) or one of its addresses", rank,
            )) from None  # fmt: skip
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if rank != 0:  # it connected (_why_unreachable), so what answered is no store of this job
            answer = f"it answered, but not as a rendezvous store ({first})"
            raise _foreign(address, port, rank, source, answer) from None
        raise RendezvousFailed(_fail(
            f"rank {rank} on {host} reached {address}:{port} but no rendezvous store answered there: {first}",
            "something else listens on that port, or MASTER_ADDR/MASTER_PORT name another run's rank 0", rank,
        )) from None  # fmt: skip


def meet(address: str, port: int, rank: int, world_size: int, timeout: float,
         source: str = "MASTER_ADDR/MASTER_PORT") -> tuple[dist.TCPStore, Check]:  # fmt: skip
    """Connect to (rank 0: host) the rendezvous store, announce this rank, and wait for every rank.

    Returns the store and this rank's passing check; raises :class:`RendezvousFailed` when this
    rank cannot reach it or not every rank arrived within ``timeout``. Rank 0 names the ranks that
    never came; the others learn it from rank 0 (the ``go`` key) and fail as echoes.
    """
    start = time.monotonic()
    deadline = start + timeout
    problem = _why_unreachable(address, port, deadline, rank, source) if rank != 0 else _why_not_host(address)
    if problem is not None:
        raise RendezvousFailed(problem)
    store = _store(address, port, rank, world_size, max(0.1, deadline - time.monotonic()), source)
    store.set(f"{ARRIVED}{rank}", socket.gethostname())
    if rank == 0:
        waiting = list(range(1, world_size))
        while waiting and time.monotonic() < deadline:
            waiting = [peer for peer in waiting if not store.check([f"{ARRIVED}{peer}"])]
            if waiting:
                time.sleep(0.01)
        store.set(GO, json.dumps(waiting))
        if waiting:
            names = ", ".join(f"rank {r}" for r in waiting)
            raise RendezvousFailed(_fail(
                f"{names} did not reach rank 0's rendezvous at {address}:{port} within {timeout:g} s",
                "see those ranks' own report (on their node, or their job output): they could not connect "
                "(address, port, firewall) or did not start",
                rank, blame=tuple(waiting)), store)  # fmt: skip
    else:
        try:
            store.wait([GO], timedelta(seconds=max(0.1, deadline - time.monotonic() + 1.0)))
            missing = json.loads(store.get(GO))
        except (dist.DistError, RuntimeError) as exc:
            raise RendezvousFailed(_fail(f"rank {rank}: rank 0 did not open the check ({exc})".splitlines()[0],
                                         "see rank 0's line", rank, echo=True)) from None  # fmt: skip
        if missing:
            raise RendezvousFailed(_fail(f"ranks {missing} did not arrive", "", rank, echo=True, blame=tuple(missing)),
                                   store)  # fmt: skip
    seconds = time.monotonic() - start
    return store, Check("rendezvous", OK, f"{world_size} ranks met at {address}:{port} in {seconds:.2f} s",
                        seconds=seconds)  # fmt: skip
