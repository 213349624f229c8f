"""Choosing gloo's interface on this host (the two-host runs are in tests/runtime/collectives/test_two_hosts.py)."""

from __future__ import annotations

import socket

import pytest

from runtime._gloo_interface import apply_gloo_interface, choose_gloo_interface
from runtime.errors import RuntimeConfigError


def test_a_rendezvous_on_the_loopback_address_needs_no_choice() -> None:
    assert choose_gloo_interface("127.0.0.1", {}) is None
    assert choose_gloo_interface("localhost", {}) is None
    assert choose_gloo_interface(None, {}) is None


def test_the_users_own_setting_always_wins() -> None:
    environ = {"GLOO_SOCKET_IFNAME": "eth7"}
    assert apply_gloo_interface("192.0.2.200", environ) is None
    assert environ == {"GLOO_SOCKET_IFNAME": "eth7"}


def test_a_main_address_this_host_cannot_resolve_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeConfigError) as caught:
        choose_gloo_interface("no-such-host.invalid", {})
    message = str(caught.value)
    assert f"this host ({socket.gethostname()}) cannot resolve the main address 'no-such-host.invalid'" in message
    assert "hint:" in message


def test_the_chosen_interface_holds_the_address_the_kernel_would_send_from() -> None:
    # Whatever this machine's network is: the address it would send from towards a documentation
    # address (a route lookup, nothing is sent) is its own, and the interface chosen for it holds it.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            pytest.skip("this host has no route off the machine")
        address = probe.getsockname()[0]
    environ: dict[str, str] = {}
    chosen = apply_gloo_interface(address, environ)
    assert chosen is not None and chosen.address == address
    assert environ == {"GLOO_SOCKET_IFNAME": chosen.name}
    assert chosen.name in {name for _, name in socket.if_nameindex()}
    assert f"GLOO_SOCKET_IFNAME={chosen.name}" in chosen.describe()
