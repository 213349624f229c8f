"""Faults between two hosts (network namespaces, own addresses and host names, no DNS entries), each with
``resolver run --nnodes 2 --rdzv-endpoint HOST:PORT --max-restarts 1`` on both while their ranks all-reduce
in a loop: the link cut during a collective, a rank frozen with ``SIGSTOP``, every process of one node
killed, and the rendezvous store's host (the endpoint's node) lost. Each is seen on the surviving node
within a bounded time, named (node, host, ranks), and ends the run with that reason; no process is left
on either host. (The link cut with ``--nnodes 1:2`` is test_two_hosts_elastic.py's: the other goes on.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
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

#: All-reduces until stopped; after its third step each rank writes its pid to argv[1]/up-RANK-countCOUNT.
#: With argv[2] "explain", each rank first writes what `resolver explain` says inside it to argv[1]/explain-RANK.
SCRIPT = """
import os, subprocess, sys, time
import runtime, torch

def work(strategy):
    count, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], strategy.global_rank
    if sys.argv[2:] == ["explain"]:
        explained = subprocess.run([sys.executable, "-m", "resolver", "explain"], capture_output=True, text=True)
        with open(os.path.join(sys.argv[1], f"explain-{rank}"), "w") as out:
            out.write(explained.stdout + explained.stderr)
    step = 0
    while True:
        strategy.heartbeat()
        strategy.collective.all_reduce(torch.ones(1))
        step += 1
        if step == 3:
            with open(os.path.join(sys.argv[1], f"up-{rank}-count{count}"), "w") as mark:
                mark.write(str(os.getpid()))
        time.sleep(0.05)

runtime.launch(work)
"""
#: The join timeout (RUNTIME_RENDEZVOUS_TIMEOUT): how long a node waits for a lost one to come back.
JOIN = 10


@pytest.fixture(scope="module")
def pair() -> Iterator[TwoHosts]:
    """One pair of hosts for the module (each test leaves both empty, the link up)."""
    made = TwoHosts.create()
    yield made
    made.remove()
    assert made.namespaces_left() == []


def _start(pair: TwoHosts, tmp_path: Path, *options: str, explain: bool = False) -> tuple[list[Any], Path, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    endpoint = f"{pair.hosts[0].address}:{find_free_port()}"
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": str(JOIN)}
    extra = ["explain"] if explain else []
    command = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--nproc-per-node", "1", "--nnodes",
               "2", "--rdzv-endpoint", endpoint, "--max-restarts", "1", *options, str(script), str(marks),
               *extra]  # fmt: skip
    processes = [host.start(command, env) for host in pair.hosts]
    deadline = time.monotonic() + 90
    while len(list(marks.glob("up-*"))) < 2:
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            results = finish(processes, timeout=5)
            pytest.fail("the ranks did not train:\n" + "\n".join(out + err for _, out, err in results))
        time.sleep(0.05)
    return processes, marks, endpoint


def _pids(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
    return [int(pid) for pid in listed.stdout.split()]


def _end(process: Any, seconds: float) -> tuple[tuple[int, str, str], float]:
    """The process's exit code, stdout and stderr, and the seconds it took to end (killed after ``seconds``)."""
    began = time.monotonic()
    (result,) = finish([process], timeout=seconds)
    return result, time.monotonic() - began


def _said(err: str) -> None:
    """Print what the launcher said (its own lines, not the ranks'), for the docs' fault table (pytest -s)."""
    print("".join(f"\n    {line}" for line in err.splitlines() if line.startswith("resolver run: ")))


def _nothing_left(pair: TwoHosts) -> None:
    for host in pair.hosts:
        kill_host(host.namespace)  # what a failed assertion left, so the next test starts clean
    for host in pair.hosts:
        subprocess.run(["ip", "-n", host.namespace, "link", "set", host.interface, "up"], check=True, timeout=30)


@pytest.fixture
def hosts(pair: TwoHosts) -> Iterator[TwoHosts]:
    """The module's pair, checked empty after the test: no process left on either host."""
    yield pair
    left = {host.hostname: _pids(host.namespace) for host in pair.hosts}
    _nothing_left(pair)
    assert left == {host.hostname: [] for host in pair.hosts}, left


def test_a_link_cut_during_a_collective_is_named_and_the_node_waits_for_it_then_ends(hosts, tmp_path):
    processes, _, endpoint = _start(hosts, tmp_path)
    second = hosts.hosts[1]
    subprocess.run(["ip", "-n", second.namespace, "link", "set", second.interface, "down"], check=True, timeout=30)
    (code, out, err), took = _end(processes[0], 60)
    # Node 1, cut off from the store's host, ends too: no answer for as long as the store takes to drop a node.
    (code_1, out_1, err_1), _ = _end(processes[1], 30)
    lost = re.findall(r"resolver run: the run ended on this node: (.*)", err_1)
    store = f"the rendezvous store at {endpoint}, hosted by node 0 (node-0 at {hosts.hosts[0].address}: rank 0)"
    assert len(lost) == 1 and lost[0].startswith(f"{store}, stopped answering (no answer for "), err_1
    assert code_1 == 1, out_1 + err_1
    named = (
        f"the rendezvous dropped node 1 ({second.hostname} at {second.address}: rank 1) of this round (no keep-alive)"
    )
    assert f"resolver run: node 0 (node-0): {named}: this node's ranks stopped" in err, err
    assert "restart 1 of 1" in err, err  # a fixed number of nodes: the loss is a failure, the restart waits for it
    assert f"missing from the last round: node 1 ({second.hostname} at {second.address}: rank 1)" in err, err
    assert code == 1, out + err
    _said(err + err_1)
    print(f"\nfrom the link cut to node 0's end (join timeout {JOIN} s): {took:.1f} s")
    assert took < 45, took


def test_a_rank_frozen_with_sigstop_is_named_on_both_nodes_and_reaped(hosts, tmp_path):
    processes, marks, endpoint = _start(hosts, tmp_path, "--progress-timeout", "5", explain=True)
    frozen = int((marks / "up-1-count0").read_text())
    os.kill(frozen, signal.SIGSTOP)
    began = time.monotonic()
    results = finish(processes, timeout=40)
    took = time.monotonic() - began
    ends = [re.findall(r"resolver run: the run ended on every node: (.*)", err) for _, _, err in results]
    assert ends[0] == ends[1] and len(ends[0]) == 1, results
    # Either node may end the run: each learns its own deadline (5 s, or 10x its median step where the
    # machine is slow enough to make that longer), and each knows, through the progress exchange, that
    # rank 1 on node 1 is the one outside any collective. Node 1 can also tell that rank 1 is frozen.
    ender = re.match(r"node (\d) \(node-\d\): rank 1 on node 1 \(node-1\) made no progress for [\d.]+ s", ends[0][0])
    assert ender is not None, ends
    if ender.group(1) == "1":
        assert (
            f"rank 1 (pid {frozen}) did not answer the request for its Python stack: a signal had frozen it"
            in results[1][2]
        )
    assert sorted(code for code, _, _ in results) == [1, 124], results
    assert not Path(f"/proc/{frozen}").exists()  # the stopped rank was killed and reaped
    _said(results[0][2] + results[1][2])
    print(f"\nfrom SIGSTOP to both nodes' end (progress timeout 5 s): {took:.1f} s")
    # `resolver explain` inside a rank of the round: which round, which nodes, why that world size.
    came = f"node 0 {hosts.hosts[0].address}, node 1 {hosts.hosts[1].address}"
    note = (f"round 0 of the c10d rendezvous at {endpoint}: 2 node(s) came ({came}); world size 2 = 2 node(s) x 1 "
            "rank(s) per node")  # fmt: skip
    for rank in (0, 1):
        explained = (marks / f"explain-{rank}").read_text()
        assert explained.startswith("this rank's config, as its launcher placed it (RESOLVER_CONFIG;"), explained
        assert f"  - {note}" in explained, explained
        assert re.search(rf"\nnode_rank +{rank} +environment the c10d rendezvous at {endpoint}", explained), explained


def test_every_process_of_a_node_killed_with_fixed_nodes_ends_the_other_naming_it(hosts, tmp_path):
    processes, _, _ = _start(hosts, tmp_path)
    second = hosts.hosts[1]
    began = time.monotonic()
    kill_host(second.namespace)
    (code, out, err), took = _end(processes[0], 45)
    finish(processes[1:], timeout=10)
    assert f"rank 1 (node 1, host {second.hostname} at {second.address}) went away" in err, err  # the ranks' view
    assert "restart 1 of 1" in err, err
    ends = re.findall(r"resolver run: the run ended on every node: (.*)", err)
    assert len(ends) == 1 and "fewer than 2 node(s) joined within the join timeout" in ends[0], err
    assert f"missing from the last round: node 1 ({second.hostname} at {second.address}: rank 1)" in ends[0], ends
    assert code == 1, out + err
    _said(err)
    print(f"\nfrom kill -9 of node 1 to node 0's end (join timeout {JOIN} s): {time.monotonic() - began:.1f} s")
    assert took < 35, took


def test_the_rendezvous_store_host_lost_ends_the_other_node_with_what_to_do(hosts, tmp_path):
    processes, _, endpoint = _start(hosts, tmp_path)
    first = hosts.hosts[0]
    kill_host(first.namespace)
    (code, out, err), took = _end(processes[1], 40)
    finish(processes[:1], timeout=10)
    ends = re.findall(r"resolver run: the run ended on this node: (.*)", err)
    assert len(ends) == 1, err
    assert ends[0].startswith(f"the rendezvous store at {endpoint}, hosted by node 0 ({first.hostname} at "
                              f"{first.address}: rank 0), stopped answering"), ends  # fmt: skip
    assert "torch's c10d rendezvous cannot move its store to another node" in ends[0], ends
    assert code == 1, out + err
    _said(err)
    print(f"\nfrom kill -9 of the store's host to the other node's end: {took:.1f} s")
    assert took < 30, took
