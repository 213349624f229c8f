"""Rendezvous ports: find a free one, tell whether one is taken, listen on one before the ranks start.

Two things made a launch take seconds instead of a fraction of one (issue 37). A rank that
connects to rank 0's ``TCPStore`` before it listens is refused, and torch's client then sleeps
(about 0.25-0.75 s, growing 1.5x per try) before it tries again. And torch's store, listening on
every interface, names that address in a log line through ``getnameinfo`` without
``NI_NUMERICHOST``: for the wildcard address ``0.0.0.0`` that is a reverse DNS query, which takes
the resolver's timeout (5 s) when the resolver is slow or unreachable, while the peers wait for the
store to answer. A launcher that listens on the port before it starts any rank
(:func:`listen_on_rendezvous_port`) hands the socket to rank 0's store (:func:`handed_store_socket`):
a peer's connection waits in the socket's queue until the store answers, with no retry; and when
every rank runs on this machine and meets on a loopback address, the socket listens on that address
alone, which ``/etc/hosts`` names (and which no other machine can reach).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import stat

__all__ = [
    "STORE_SOCKET_VARIABLE",
    "check_rendezvous_port",
    "find_free_port",
    "host_holds",
    "handed_store_socket",
    "listen_on_rendezvous_port",
    "port_is_free",
    "store_socket_variables",
]

#: ``FD:INODE`` of the socket, listening on the rendezvous port, that rank 0's store serves on.
STORE_SOCKET_VARIABLE = "RUNTIME_STORE_SOCKET"


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


def host_holds(address: str) -> bool:
    """Whether this host holds ``address`` (it can bind to it); False for a name that does not resolve."""
    try:
        infos = socket.getaddrinfo(address.strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, where in infos:
        with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as probe:
            try:
                probe.bind((where[0], 0))
                return True
            except OSError:
                continue
    return False


def check_rendezvous_port(address: str, port: int, source: str, node_rank: int) -> None:
    """Raise :class:`~runtime.errors.PortInUseError` when node 0 cannot host the rendezvous on ``port``.

    A busy port is an error rather than a silent switch to another port: the other nodes (and
    anyone who set ``MASTER_PORT`` on purpose) expect this exact one. ``source`` says where the
    port came from, for the message.
    """
    from runtime._protocol.port_holder import port_holder
    from runtime.errors import PortInUseError

    if node_rank == 0 and not port_is_free(port):
        raise PortInUseError(address, port, source, port_holder(port))


def listen_on_rendezvous_port(
    address: str, port: int, source: str, node_rank: int, *, one_machine: bool
) -> socket.socket | None:
    """On node 0, a socket listening on ``port`` for rank 0's store; ``None`` on the other nodes.

    It listens on ``address`` when it is a loopback address and every rank runs on this machine
    (``one_machine``), else on every interface, as torch's store would. Raises
    :class:`~runtime.errors.PortInUseError` when the port is taken (``source`` says where it came
    from), as :func:`check_rendezvous_port` does.
    """
    from runtime._protocol.port_holder import port_holder
    from runtime.errors import PortInUseError

    if node_rank != 0:
        return None
    if one_machine and _is_loopback(address):
        candidates = socket.getaddrinfo(address.strip("[]"), port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                        socket.AI_NUMERICHOST)  # fmt: skip
    else:  # the addresses torch's TCPStore server tries, in its order
        candidates = socket.getaddrinfo(None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    for family, kind, protocol, _, where in candidates:  # the first one that binds
        sock = socket.socket(family, kind, protocol)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 peers too
            sock.bind(where)
            sock.listen(socket.SOMAXCONN)
        except OSError:
            sock.close()
            continue
        return sock
    raise PortInUseError(address, port, source, port_holder(port))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:  # a host name
        return False


def store_socket_variables(sock: socket.socket | None) -> dict[str, str]:
    """What tells rank 0 of this process (or of a child that inherits ``sock``) to serve its store on ``sock``."""
    if sock is None:
        return {}
    return {STORE_SOCKET_VARIABLE: f"{sock.fileno()}:{os.fstat(sock.fileno()).st_ino}"}


def handed_store_socket(port: int) -> int | None:
    """A new descriptor of the socket its launcher listens on for rank 0's store (``None``: none).

    The caller owns the descriptor (``TCPStore(master_listen_fd=...)`` closes it with the store).
    Only the socket the variable names: an inherited variable may name a descriptor that is now
    something else, or a socket on another port.
    """
    fd, _, inode = os.environ.get(STORE_SOCKET_VARIABLE, "").partition(":")
    if not (fd.isascii() and fd.isdigit() and inode.isascii() and inode.isdigit()):
        return None
    try:
        found = os.fstat(int(fd))
        if not stat.S_ISSOCK(found.st_mode) or found.st_ino != int(inode):
            return None
        with socket.socket(fileno=os.dup(int(fd))) as sock:
            if sock.getsockname()[1] != port or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                return None
            return sock.detach()
    except OSError:
        return None
