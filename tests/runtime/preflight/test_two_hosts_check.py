"""``resolver check`` across two hosts (network namespaces, see two_hosts_support.py): it passes with
a figure per host pair, and a main address that one host cannot reach is named with that host,
the address and the fix, within the timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from runtime._protocol.ports import find_free_port
from tests.support.two_hosts_support import REQUIRE_VARIABLE, TwoHosts, finish, host_environment, missing_prerequisite

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

_why_not = missing_prerequisite()
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"two hosts as network namespaces: {_why_not}", allow_module_level=True)


def _check_on(hosts: TwoHosts, addresses: list[str], port: int, timeout: str) -> list[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "1", "--num-nodes",
               "2", "--master-port", str(port), "--timeout", timeout]  # fmt: skip
    return [
        host.start([*command, "--node-rank", str(node), "--master-addr", address], host_environment())
        for node, (host, address) in enumerate(zip(hosts.hosts, addresses, strict=True))
    ]


def test_a_check_across_two_hosts_passes_with_a_figure_per_host_pair(hosts):
    main = hosts.hosts[0].address
    (code0, out0, err0), (code1, out1, err1) = finish(_check_on(hosts, [main, main], find_free_port(), "30"))
    assert (code0, code1) == (0, 0), out0 + err0 + out1 + err1
    assert "9 checks, passed, 2 ranks" in out0
    assert "0->1 (node-0->node-1)" in out0 and "1->0 (node-1->node-0)" in out0
    assert f"2 ranks met at {main}:" in out0
    assert "9 checks, passed" in out1  # node 1's launcher reports its own rank


def test_a_main_address_one_host_cannot_reach_names_that_host_and_address(hosts):
    main = hosts.hosts[0].address
    unreachable = f"{hosts.subnet.rsplit('.', 1)[0]}.251.1"  # another subnet: node-1 has no route to it
    start = time.monotonic()
    (code0, out0, err0), (code1, out1, err1) = finish(_check_on(hosts, [main, unreachable], find_free_port(), "6"))
    assert code0 == 1 and code1 == 1, out0 + err0 + out1 + err1
    # node 1 says why it cannot come: its host, the address it tried, and the fix
    assert "FAIL rendezvous" in out1
    assert f"no network interface of this host (node-1) routes to the main address {unreachable}" in out1, out1
    assert "rank 1 on node-1" in out1 and "= help:" in out1
    # node 0 names the rank that never came, within its timeout
    assert "FAIL rendezvous  rank 1 did not reach rank 0's rendezvous at" in out0, out0
    assert time.monotonic() - start < 120


def test_a_main_address_of_another_host_is_named_on_rank_0(hosts):
    other = hosts.hosts[1].address  # node-1's own address: rank 1 looks for rank 0 on its own host
    (code0, out0, err0), (code1, out1, err1) = finish(_check_on(hosts, [other, other], find_free_port(), "5"))
    assert code0 == 1 and code1 == 1, out0 + err0 + out1 + err1
    assert f"rank 0 on node-0: the main address {other} is not an address of this host" in out0, out0
    assert "set MASTER_ADDR (or --master-addr) to rank 0's host (node-0)" in out0
    assert f"rank 1 on node-1: nothing listens at {other}:" in out1, out1
