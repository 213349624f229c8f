"""Where a node of a multi-node run stands: the endpoint's address (never this host's name resolved, which
fails on hosts without DNS entries) and the address this node sends from towards it, which it advertises."""

from __future__ import annotations

import ipaddress
import socket

from runtime.errors import RuntimeConfigError

__all__ = ["address_towards", "endpoint_address"]


def endpoint_address(host: str, source: str) -> str:
    """The endpoint's IPv4 address: ``host`` itself, or what it resolves to (the endpoint's name, never
    this host's)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except socket.gaierror as exc:
        raise RuntimeConfigError(
            f"this host ({socket.gethostname()}) cannot resolve the rendezvous endpoint {host!r} ({source}): "
            f"{exc.strerror}",
            hint="give the endpoint as an address every node can reach (e.g. --rdzv-endpoint 10.0.0.1:29400)",
        ) from None


def address_towards(target: str, source: str) -> str:
    """The address the kernel sends from to reach ``target`` (a UDP connect looks up the route only)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, 9))
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise RuntimeConfigError(
            f"no network interface of this host ({socket.gethostname()}) routes to the rendezvous endpoint "
            f"{target} ({source}): {exc.strerror or exc}",
            hint="give an endpoint address this host can reach, the address of the node that hosts the rendezvous",
        ) from None
