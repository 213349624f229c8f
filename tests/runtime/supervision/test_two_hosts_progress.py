"""The progress watchdog across two hosts (network namespaces, own addresses and host names): each node's
launcher shares its ranks' progress through the c10d rendezvous store, so with no ``timeout`` set a rank
stuck on node 2 is named with its host on both nodes, with where the other waits; and a node whose link is
cut during a collective is named as silent by the other, instead of both hanging until torch's timeout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime._protocol.ports import find_free_port
from tests.support.two_hosts_support import (
    REQUIRE_VARIABLE,
    TwoHosts,
    finish,
    host_environment,
    kill_host,
    missing_prerequisite,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(150)]

_why_not = missing_prerequisite()
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"two hosts as network namespaces: {_why_not}", allow_module_level=True)

#: Steps of an all_reduce and a heartbeat; marks step 30 in argv[3]. With argv[2] == "stuck", the rank on the
#: host named argv[1] loops in plain Python at step 20; with "mismatch", it calls a broadcast there where the
#: other rank runs its all_reduce; with "slow", it takes 4x the other's own work per step (120 ms against 30)
#: and the run ends after 150 steps.
SCRIPT = """
import os, socket, sys, time
import runtime, torch

def work(strategy):
    slow = sys.argv[2] == "slow"
    pause = (0.12 if socket.gethostname() == sys.argv[1] else 0.03) if slow else 0.05
    for step in range(150 if slow else 100000):
        total = torch.ones(1)
        strategy.collective.all_reduce(total)
        strategy.heartbeat()
        if step == 30:
            open(os.path.join(sys.argv[3], f"step30-{socket.gethostname()}"), "w").close()
        if step == 20 and sys.argv[2] == "stuck" and socket.gethostname() == sys.argv[1]:
            while True:
                time.sleep(0.05)
        if step == 20 and sys.argv[2] == "mismatch" and socket.gethostname() == sys.argv[1]:
            strategy.collective.broadcast(torch.ones(1), src=0)  # where the other rank runs its all_reduce
        time.sleep(pause)

runtime.launch(work, accelerator="cpu", devices=1, num_nodes=2)
"""
#: The line of the script's all_reduce, where a waiting rank is shown.
ALL_REDUCE_LINE = next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if "all_reduce(" in line)
BROADCAST_LINE = next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if "broadcast(" in line)


def _start(hosts: TwoHosts, tmp: Path, mode: str, progress_timeout: int) -> list[Any]:
    script, marks = tmp / "train.py", tmp / "marks"
    script.write_text(SCRIPT)
    marks.mkdir()
    endpoint = f"{hosts.hosts[0].address}:{find_free_port()}"
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": "60"}
    command = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--nproc-per-node", "1", "--nnodes",
               "2", "--rdzv-endpoint", endpoint, "--max-restarts", "1", "--progress-timeout", str(progress_timeout),
               str(script), hosts.hosts[1].hostname, mode, str(marks)]  # fmt: skip
    return [host.start(command, env) for host in hosts.hosts]


def test_a_rank_stuck_on_node_2_is_named_with_its_host_on_both_nodes(hosts: TwoHosts, tmp_path: Path) -> None:
    started = time.monotonic()
    results = finish(_start(hosts, tmp_path, "stuck", 3), timeout=120)
    took = time.monotonic() - started

    first, second = (host.hostname for host in hosts.hosts)
    for _, out, err in results:
        # Every node prints the run's end: the stuck rank with its node and host, where the other rank waits.
        ends = re.findall(r"resolver run: the run ended on every node: node \d \(node-\d\): (.*)", err)
        assert len(ends) == 1, out + err
        stuck = re.match(rf"rank (\d) on node \d \({second}\) made no progress for [\d.]+ s ", ends[0])
        assert stuck is not None, ends
        other = 1 - int(stuck.group(1))  # the c10d rendezvous numbers the nodes as they join
        waits = re.search(rf"rank {other} was waiting for it in all_reduce #(\d+) \(called at train.py:(\d+) in "
                          rf"work\) on node \d \({first}\)", err)  # fmt: skip
        assert waits is not None and waits.group(2) == str(ALL_REDUCE_LINE), err
        assert (
            f"rank {stuck.group(1)} is at #{int(waits.group(1)) - 1}: it ran 1 collective fewer than rank {other}"
            in (err)
        )
    assert {code for code, _, _ in results} <= {1, 124} and 124 in {code for code, _, _ in results}, results
    print(f"\nfrom both nodes' start to both ended (a 3 s progress deadline): {took:.1f} s")


def test_a_node_whose_link_is_cut_in_a_collective_is_named_silent_by_the_other(hosts: TwoHosts, tmp_path: Path) -> None:
    processes = _start(hosts, tmp_path, "train", 6)
    marks = tmp_path / "marks"
    second = hosts.hosts[1]
    try:
        deadline = time.monotonic() + 90
        while len(list(marks.iterdir())) < 2:
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes), "no training on both"
            time.sleep(0.05)
        cut = time.monotonic()
        subprocess.run(["ip", "-n", second.namespace, "link", "set", second.interface, "down"], check=True, timeout=30)
        code, out, err = finish(processes[:1], timeout=60)[0]
        ended = time.monotonic()
    finally:
        kill_host(second.namespace)  # cut off for good: what it prints is not this test's
        finish(processes, timeout=30)

    assert code == 124, out + err
    assert re.search(rf"rank \d on node \d \({second.hostname}\) made no progress for [\d.]+ s ", err), err
    silent = re.search(rf"node \d \({second.hostname}, {second.address}\) is silent: its progress entry stopped "
                       r"changing \d+ s ago \(its link cut, its host down or its launcher stopped\); last seen: "
                       r"rank \d", err)  # fmt: skip
    assert silent is not None, err
    assert re.search(r"rank \d was waiting for it in all_reduce #\d+ \(called at train.py:\d+ in work\)", err), err
    print(f"\nfrom the link cut to node 1's launcher's end (a 6 s progress deadline): {ended - cut:.1f} s")


def test_a_straggler_on_node_2_is_named_with_its_host_on_both_nodes(hosts: TwoHosts, tmp_path: Path) -> None:
    results = finish(_start(hosts, tmp_path, "slow", 60), timeout=120)
    second = hosts.hosts[1].hostname
    for code, out, err in results:
        assert code == 0, out + err
        # Each node compares every rank of the round (its own and the other node's, through the exchange).
        report = (rf"^straggler: rank (\d) \(host {second}\) spends ([\d.]+) ms per step in its own work "
                  r"\(outside collectives\), ([\d.]+)x the other ranks' median of ([\d.]+) ms")  # fmt: skip
        named = re.findall(report, err, re.M)
        assert len(named) == 1, err
        rank, own, ratio, median = named[0]
        assert float(ratio) >= 1.3 and float(own) > float(median), named
        assert re.search(rf"^resolver run: straggler\(s\) rank {rank}; own work per step", err, re.M), err
        assert not re.search(r"^straggler: rank \d \(host node-0\)", err, re.M), err  # the fast one: never named


def test_ranks_in_different_collectives_on_two_hosts_are_named_each_with_its_line_on_both_nodes(
    hosts: TwoHosts, tmp_path: Path
) -> None:
    results = finish(_start(hosts, tmp_path, "mismatch", 3), timeout=120)
    first, second = (host.hostname for host in hosts.hosts)
    for _, out, err in results:
        ends = re.findall(r"resolver run: the run ended on every node: node \d \(node-\d\): (.*)", err)
        assert len(ends) == 1, out + err
        pattern = (r"the ranks wait in different collectives: rank 0 in (\w+) #(\d+) \(called at train.py:(\d+) in "
                   r"work\), rank 1 in (\w+) #(\d+) \(called at train.py:(\d+) in work\)")  # fmt: skip
        named = re.search(pattern, err)
        assert named is not None, err
        operations = {named.group(1): int(named.group(3)), named.group(4): int(named.group(6))}
        assert operations == {"all_reduce": ALL_REDUCE_LINE, "broadcast": BROADCAST_LINE}, err
        assert named.group(2) == named.group(5), err  # the same number: the collectives told apart
    # 124 where the node ended the run; both may (each diagnosed the stall and waited for the other's word)
    codes = [code for code, _, _ in results]
    assert 124 in codes and set(codes) <= {1, 124}, results
