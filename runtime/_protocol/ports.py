"""Rendezvous ports: find a free one, tell whether one is taken."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["check_rendezvous_port", "find_free_port", "port_is_free"]


def find_free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` on every interface, as rank 0's store does."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        # Like torch's TCPStore, tolerate a port still in TIME_WAIT from a finished run.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            # bind() alone: a listening probe could accept (and drop) a peer's early connection.
            sock.bind(("", port))
        except OSError:
            return False
    return True


def check_rendezvous_port(address: str, port: int, source: str, node_rank: int) -> None:
    """Raise :class:`~runtime.errors.PortInUseError` when node 0 cannot host the rendezvous on ``port``.

    A busy port is an error rather than a silent switch to another port: the other nodes (and
    anyone who set ``MASTER_PORT`` on purpose) expect this exact one. ``source`` says where the
    port came from, for the message.
    """
    from runtime.errors import PortInUseError

    if node_rank == 0 and not port_is_free(port):
        raise PortInUseError(address, port, source)
