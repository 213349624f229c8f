"""Which rank runs where: the host each rank announced at the rendezvous, to name a peer that vanished.

gloo reports a peer that went away by its address only ("Connection closed by peer
[10.88.0.2]:38583", "Read error [10.88.0.2]:50889: Connection reset by peer"). On one host the
launcher sees the dead rank itself; across hosts it sees only its own ranks' echoes. So every rank
announces its host name, node and addresses at the rendezvous (:func:`announcement`), keeps what
all ranks announced (:func:`remember_hosts`), and a communication error that names an address is
reported with the ranks on that host (:func:`lost_peer`).

A rank whose work returned records that in the rendezvous store (:func:`record_finished`) before it
leaves the process group: a peer whose connection then ends is told apart by fact, when an error
already happened (:func:`finished_ranks`): one that finished skipped a call every rank must make,
one that did not went away (killed, out of memory, its host lost).
"""

from __future__ import annotations

import json
import os
import re
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from runtime.errors import PeerStoppedAnsweringError

__all__ = [
    "LostPeer",
    "PeerHost",
    "announcement",
    "finished_ranks",
    "has_store",
    "host_of",
    "lost_peer",
    "peer_gone",
    "peers_that_finished_or_went",
    "record_finished",
    "remember_hosts",
    "remember_store",
]


@attrs.frozen
class PeerHost:
    """Where one rank runs: its host name, its node (``None``: unknown) and the host's IPv4 addresses."""

    rank: int
    host: str
    node: int | None
    addresses: tuple[str, ...]


@attrs.frozen
class LostPeer:
    """The peer a communication error names: its address and port, and the ranks on that host."""

    address: str
    port: int
    #: gloo's own words, e.g. "Connection closed by peer [10.88.0.2]:38583".
    words: str
    ranks: tuple[int, ...] = ()
    host: str | None = None
    node: int | None = None

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> LostPeer | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["address"]), int(data["port"]), str(data["words"]), tuple(map(int, data["ranks"])),
                       data.get("host"), data.get("node"))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None


class Store(Protocol):
    """What this module uses of a ``torch.distributed.Store`` (torch is not imported here)."""

    def set(self, key: str, value: str) -> None: ...
    def check(self, keys: list[str]) -> bool: ...
    def set_timeout(self, timeout: timedelta) -> None: ...


_hosts: dict[int, PeerHost] = {}
#: The rendezvous store this process's rank joined through (None: none, or the group was the user's).
_store: list[Store] = []
_FINISHED = "runtime-rendezvous/finished-"
#: How long a store read or write after an error may wait: a store whose host vanished must not
#: hold the error back for the rendezvous timeout.
STORE_WAIT = timedelta(seconds=10)

#: gloo's transport errors: "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [ADDR]:PORT. This ..."
_GLOO_WORDS = re.compile(
    r"/gloo/transport/[^\]]*\] (?P<words>[^\n]*?\[(?P<address>[0-9A-Fa-f.:]+)\]:(?P<port>\d+)[^.\n]*)"
)


def announcement(addresses: tuple[str, ...]) -> str:
    """What this rank announces: its host name, its node (``GROUP_RANK``/``NODE_RANK``) and ``addresses``."""
    node = os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", ""))
    return json.dumps({"host": socket.gethostname(), "node": int(node) if node.isdigit() else None,
                       "addresses": list(addresses)})  # fmt: skip


def remember_hosts(announced: dict[int, bytes | str]) -> None:
    """Keep what every rank announced (rank -> :func:`announcement`), for :func:`lost_peer`."""
    _hosts.clear()
    for rank, text in announced.items():
        try:
            data = json.loads(text)
            _hosts[rank] = PeerHost(rank, str(data["host"]), data.get("node"), tuple(map(str, data["addresses"])))
        except (KeyError, TypeError, ValueError):
            continue


def remember_store(store: Store | None) -> None:
    """Keep the rendezvous store for :func:`record_finished` and :func:`finished_ranks` (None: forget it)."""
    _store[:] = [] if store is None else [store]


def has_store() -> bool:
    """Whether this process keeps a rendezvous store (the runtime made its process group)."""
    return bool(_store)


def record_finished(rank: int) -> None:
    """Record that ``rank``'s work returned (before it leaves the process group); nothing without a store."""
    if not _store:
        return
    try:
        _store[0].set_timeout(STORE_WAIT)
        _store[0].set(f"{_FINISHED}{rank}", "1")
    except Exception:  # the store is gone (its host left): there is nobody left to tell
        pass


def finished_ranks(ranks: list[int]) -> tuple[int, ...] | None:
    """Which of ``ranks`` recorded that their work returned; None without a store or when it cannot be read."""
    if not _store:
        return None
    try:
        _store[0].set_timeout(STORE_WAIT)
        return tuple(rank for rank in ranks if _store[0].check([f"{_FINISHED}{rank}"]))
    except Exception:  # the store's host went away too, or the network to it
        return None


#: A connection a peer ended, in any transport's words.
_PEER_GONE = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe", re.IGNORECASE)


def peer_gone(message: str) -> bool:
    """Whether an error's first line says a peer ended the connection (not a timeout or a bad call)."""
    return bool(_PEER_GONE.search(message.split("\n", 1)[0]))


def host_of(rank: int) -> str | None:
    """The host ``rank`` announced at the rendezvous (None: unknown)."""
    peer = _hosts.get(rank)
    return None if peer is None else peer.host


def lost_peer(message: str) -> LostPeer | None:
    """The peer a gloo transport error names, with the ranks on its host where they are known."""
    found = _GLOO_WORDS.search(message.split("\n", 1)[0])
    if found is None:
        return None
    address = found["address"]
    on_host = [peer for peer in _hosts.values() if address in peer.addresses]
    first = on_host[0] if on_host else None
    return LostPeer(
        address,
        int(found["port"]),
        found["words"].strip(),
        tuple(sorted(peer.rank for peer in on_host)),
        None if first is None else first.host,
        None if first is None else first.node,
    )


def peers_that_finished_or_went(
    me: int, world_size: int, method: str, message: str, cause: str
) -> tuple[str, PeerStoppedAnsweringError | None]:
    """After a collective in ``method`` failed with ``message`` in rank ``me``: which peers returned from
    their work (``"rank N"``, for the misuse message; "" when none did or it cannot be read), or, when
    the connection to a peer ended and none did, the error saying it stopped answering. One store
    read, only now that an error already happened."""
    from runtime.errors import PeerStoppedAnsweringError

    others = [rank for rank in range(world_size) if rank != me]
    finished = finished_ranks(others)
    if finished:
        return ("rank " if len(finished) == 1 else "ranks ") + ", ".join(map(str, finished)), None
    lost = lost_peer(message)
    if not (lost is not None or peer_gone(message)):
        return "", None  # a timeout or another failure: no peer is known to have gone
    ranks = [rank for rank in (lost.ranks if lost is not None else ()) if rank != me] or others
    host = lost.host if lost is not None and lost.ranks else (host_of(ranks[0]) if len(ranks) == 1 else None)
    unsure = ""
    if finished is None:
        unsure = (
            "the rendezvous store is gone too, so whether it finished cannot be read: its host (rank 0, or the "
            "launcher) went away"
            if has_store()
            else "whether it finished is unknown: the process group was made outside the runtime"
        )
    gone = PeerStoppedAnsweringError(
        method, ranks, host=host, seen_by=me, words=lost.words if lost is not None else cause, unsure=unsure
    )
    gone.lost_peer = lost
    return "", gone
