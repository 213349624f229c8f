"""Which network interface gloo binds to on a host, when the user has not said.

Gloo finds its own address by resolving the host's name. On a host without an address for its own
name (containers, cluster nodes without DNS entries for themselves) that fails, gloo falls back to
the loopback address and tells the other hosts to connect to 127.0.0.1: the run then fails after
its timeout with "connectFullMesh failed ... remote=[127.0.0.1]", far from the cause. The kernel's
own route lookup says which local address reaches the rendezvous host; the interface holding that
address is the one every peer can reach this host on, so gloo is told to bind there
(``GLOO_SOCKET_IFNAME``). A user's ``GLOO_SOCKET_IFNAME`` always wins.

NCCL is left alone: it chooses its interfaces itself (preferring InfiniBand) and does not go by the
host's name; ``NCCL_SOCKET_IFNAME`` stays the user's to set.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator, Mapping, MutableMapping
from typing import NamedTuple

from runtime.errors import RuntimeConfigError

__all__ = [
    "GLOO_INTERFACE_VARIABLE",
    "SocketInterface",
    "apply_gloo_interface",
    "choose_gloo_interface",
    "host_addresses",
]

GLOO_INTERFACE_VARIABLE = "GLOO_SOCKET_IFNAME"
#: ioctl request: the IPv4 address of an interface (Linux).
_SIOCGIFADDR = 0x8915


class SocketInterface(NamedTuple):
    """The interface chosen for gloo on this host, with the address it holds and why."""

    name: str
    address: str
    main_address: str

    def describe(self) -> str:
        return (
            f"{GLOO_INTERFACE_VARIABLE}={self.name}: its address {self.address} is the one this host "
            f"({socket.gethostname()}) reaches the main address {self.main_address} from "
            f"(set {GLOO_INTERFACE_VARIABLE} to choose another)"
        )


def _resolve(main_address: str) -> str:
    try:
        infos = socket.getaddrinfo(main_address, None, socket.AF_INET, socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise RuntimeConfigError(
            f"this host ({socket.gethostname()}) cannot resolve the main address {main_address!r} "
            f"({exc.strerror}), so it cannot reach rank 0's rendezvous",
            hint="give rank 0's host as an address every host can reach (MASTER_ADDR, --master-addr, or the "
            "cluster's node list), or add the name to this host's resolver",
        ) from None
    return str(infos[0][4][0])


def _local_address_towards(target: str) -> str:
    """The local address the kernel would send from to reach ``target`` (connecting a UDP socket
    only looks up the route: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((target, 9))
        return str(probe.getsockname()[0])


def _interface_addresses() -> Iterator[tuple[str, str]]:
    """``(interface, IPv4 address)`` for each interface of this host that has one."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on this interface
                continue
        yield name, socket.inet_ntoa(packed[20:24])


def _interface_holding(address: str) -> str | None:
    return next((name for name, held in _interface_addresses() if held == address), None)


def host_addresses() -> tuple[str, ...]:
    """This host's IPv4 addresses (every interface's, loopback included): those a peer may name it by."""
    try:
        return tuple(address for _, address in _interface_addresses())
    except OSError:  # no interface list here (not Linux)
        return ()


def choose_gloo_interface(main_address: str | None, environ: Mapping[str, str]) -> SocketInterface | None:
    """The interface gloo should bind to for a rendezvous at ``main_address``, or None where there
    is nothing to choose: the user set ``GLOO_SOCKET_IFNAME``, the rendezvous is on the loopback
    address (one host), or the address is IPv6 / held by no named interface.

    Raises :class:`RuntimeConfigError` naming this host, the address and the fix where the address
    cannot be resolved or no interface routes to it, before any rank waits for another.
    """
    if not main_address or environ.get(GLOO_INTERFACE_VARIABLE, "").strip():
        return None
    target = _resolve(main_address)
    if ipaddress.ip_address(target).is_loopback:
        return None
    try:
        local = _local_address_towards(target)
    except OSError as exc:
        raise RuntimeConfigError(
            f"no network interface of this host ({socket.gethostname()}) routes to the main address "
            f"{main_address}{'' if target == main_address else f' ({target})'}: {exc.strerror or exc}",
            hint="check that rank 0's address (MASTER_ADDR, --master-addr, or the cluster's node list) is one this "
            f"host can reach, or set {GLOO_INTERFACE_VARIABLE} to the interface to use",
        ) from None
    name = _interface_holding(local)
    return None if name is None else SocketInterface(name, local, main_address)


def apply_gloo_interface(
    main_address: str | None, environ: MutableMapping[str, str] | None = None
) -> SocketInterface | None:
    """:func:`choose_gloo_interface`, then set ``GLOO_SOCKET_IFNAME`` in ``environ`` (this process's
    environment by default), which gloo reads when it creates its devices."""
    target = os.environ if environ is None else environ
    chosen = choose_gloo_interface(main_address, target)
    if chosen is not None:
        target[GLOO_INTERFACE_VARIABLE] = chosen.name
    return chosen
