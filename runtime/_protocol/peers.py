"""Which rank runs where: the host each rank announced at the rendezvous, to name a peer that vanished.

gloo reports a peer that went away by its address only ("Connection closed by peer
[10.88.0.2]:38583", "Read error [10.88.0.2]:50889: Connection reset by peer"). On one host the
launcher sees the dead rank itself; across hosts it sees only its own ranks' echoes. So every rank
announces its host name, node and addresses at the rendezvous (:func:`announcement`), keeps what
all ranks announced (:func:`remember_hosts`), and a communication error that names an address is
reported with the ranks on that host (:func:`lost_peer`).
"""

from __future__ import annotations

import json
import os
import re
import socket

import attrs

__all__ = ["LostPeer", "PeerHost", "announcement", "lost_peer", "remember_hosts"]


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


_hosts: dict[int, PeerHost] = {}

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
