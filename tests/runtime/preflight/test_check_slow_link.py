"""``resolver check`` flags a real slow link: three hosts (network namespaces on a bridge, see
two_hosts_support.py for one host), one rank each, and the traffic from node-0 to node-1 throttled
to 20 Mbit/s with tc (an HTB class for that destination only). The ring's pairs are 0->1, 1->2
and 2->0; only 0->1 crosses the throttled direction, so the report must flag exactly that pair, as
a warning: the check still passes (exit 0)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from typing import Any

import attrs
import pytest

from runtime._protocol.ports import find_free_port
from tests.support.two_hosts_support import REQUIRE_VARIABLE, Host, finish, host_environment, missing_prerequisite

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

_why_not = missing_prerequisite() or (None if shutil.which("tc") else "tc is not installed (Debian: iproute2)")
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"three hosts as network namespaces: {_why_not}", allow_module_level=True)

RATE = "20mbit"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=True, capture_output=True, text=True, timeout=30)


@attrs.frozen
class BridgedHosts:
    """``count`` hosts, each a namespace with a veth into a switch namespace's bridge."""

    hosts: tuple[Host, ...]
    switch: str

    @classmethod
    def create(cls, count: int) -> BridgedHosts:
        tag = f"{os.getpid() % 100000}{random.randrange(100)}"
        subnet = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
        hosts = tuple(Host(f"rs{tag}{i}", f"node-{i}", f"{subnet}.{i + 1}", f"rs{tag}{i}") for i in range(count))
        made = cls(hosts, f"rs{tag}w")
        try:
            _run("ip", "netns", "add", made.switch)
            _run("ip", "-n", made.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", made.switch, "link", "set", "br0", "up")
            for host in hosts:
                _run("ip", "netns", "add", host.namespace)
                _run("ip", "link", "add", host.interface, "type", "veth", "peer", "name", f"{host.interface}s")
                _run("ip", "link", "set", host.interface, "netns", host.namespace)
                _run("ip", "link", "set", f"{host.interface}s", "netns", made.switch)
                _run("ip", "-n", made.switch, "link", "set", f"{host.interface}s", "master", "br0", "up")
                _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface)
                _run("ip", "-n", host.namespace, "link", "set", host.interface, "up")
                _run("ip", "-n", host.namespace, "link", "set", "lo", "up")
        except BaseException:
            made.remove()
            raise
        return made

    def throttle(self, source: Host, destination: Host, rate: str) -> None:
        """Limit what ``source`` sends to ``destination`` to ``rate``; its other traffic is not classified
        (HTB's default class 99 does not exist), so it leaves unthrottled."""
        tc = ["ip", "netns", "exec", source.namespace, "tc"]
        _run(*tc, "qdisc", "add", "dev", source.interface, "root", "handle", "1:", "htb", "default", "99")
        _run(*tc, "class", "add", "dev", source.interface, "parent", "1:", "classid", "1:10", "htb", "rate", rate)
        _run(*tc, "filter", "add", "dev", source.interface, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{destination.address}/32", "flowid", "1:10")  # fmt: skip

    def remove(self) -> None:
        # deleting a namespace deletes its veth end (and so the pair) and the qdiscs on it
        for namespace in (*(host.namespace for host in self.hosts), self.switch):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)

    def namespaces_left(self) -> list[str]:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        names = {line.split()[0] for line in listed.splitlines() if line.strip()}
        return [n for n in (*(host.namespace for host in self.hosts), self.switch) if n in names]


@pytest.fixture
def hosts() -> Any:
    made = BridgedHosts.create(3)
    yield made
    made.remove()
    assert made.namespaces_left() == []


def test_a_throttled_link_is_flagged_as_exactly_that_pair_and_the_check_still_passes(hosts):
    node0, node1, _ = hosts.hosts
    try:
        hosts.throttle(node0, node1, RATE)
    except subprocess.CalledProcessError as exc:  # a kernel without HTB or the u32 classifier
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            raise
        pytest.skip(f"tc cannot throttle one destination here ({exc.stderr.strip()}): needs sch_htb and cls_u32")
    port = find_free_port()
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "1", "--num-nodes",
               "3", "--master-addr", node0.address, "--master-port", str(port), "--timeout", "30"]  # fmt: skip
    processes = [
        host.start([*command, "--node-rank", str(i)], host_environment()) for i, host in enumerate(hosts.hosts)
    ]
    results = finish(processes)
    assert [code for code, _, _ in results] == [0, 0, 0], results
    report = results[0][1]
    assert "9 checks, passed with 1 warning (ring), 3 ranks" in report, report
    (ring,) = [line for line in report.splitlines() if line.startswith("WARN ring")]
    slow = re.findall(r"slow link (\S+ \(\S+\))", ring)
    assert slow == ["0->1 (node-0->node-1)"], ring
    assert "1 MiB takes" in ring and "median of the pairs across hosts" in ring
    marked = [line.split()[0] for line in report.splitlines() if line.endswith("<- slow")]
    assert marked == ["0->1"], report
    # the healthy pairs are there, unmarked
    assert "1->2 (node-1->node-2)" in report and "2->0 (node-2->node-0)" in report
