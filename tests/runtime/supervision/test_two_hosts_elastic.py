"""Elastic membership on two hosts (network namespaces, own addresses and host names, no DNS entries):
``resolver run --nnodes 1:2 --rdzv-endpoint HOST:PORT --max-restarts 1`` on each. Node 1 trains alone,
node 2 started later joins at the next round (without using the restart), once node 2 is gone
(``kill -9`` of every process on its host) node 1 goes on alone, and node 2 started again joins again:
the world size the ranks print follows, and each round's config says which round, which nodes and why
that world size. A node whose link is cut is dropped by the rendezvous (no keep-alive) and the other
goes on alone too, without waiting for its ranks' collective timeout."""

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

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

_why_not = missing_prerequisite()
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"two hosts as network namespaces: {_why_not}", allow_module_level=True)

#: Steps until a file ``stop`` appears in argv[1]; marks each round's first step there (world size, count).
SCRIPT = """
import os, sys, time
import runtime, torch

def work(strategy):
    folder = sys.argv[1]
    count = os.environ["TORCHELASTIC_RESTART_COUNT"]
    config = runtime.launched_config()
    world = strategy.world_size
    print(f"round rank={strategy.global_rank} world={world} count={count} note={config.notes[-1]}", flush=True)
    print(f"why world_size: {config.provenance['world_size'].describe()}", flush=True)
    open(os.path.join(folder, f"world{world}-rank{strategy.global_rank}-count{count}"), "w").close()
    while True:
        flag = torch.tensor([float(os.path.exists(os.path.join(folder, "stop")))])
        strategy.collective.all_reduce(flag)
        if flag.item() > 0:
            break
        time.sleep(0.1)
    print(f"done rank={strategy.global_rank} world={world} count={count}", flush=True)

runtime.launch(work)
"""


@pytest.fixture
def hosts() -> Any:
    made = TwoHosts.create()
    yield made
    made.remove()
    assert made.namespaces_left() == []


def _wait_for(folder: Path, name: str, processes: list[Any], seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while not list(folder.glob(name)):
        assert time.monotonic() < deadline, f"no {name} within {seconds} s: {sorted(p.name for p in folder.iterdir())}"
        assert processes[0].poll() is None, "node 1's launcher ended"
        time.sleep(0.05)
    return time.monotonic()


def _command(hosts: TwoHosts, script: Path, marks: Path) -> tuple[str, list[str], dict[str, str]]:
    endpoint = f"{hosts.hosts[0].address}:{find_free_port()}"
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": "60"}
    command = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--nproc-per-node", "1", "--nnodes",
               "1:2", "--rdzv-endpoint", endpoint, "--max-restarts", "1", str(script), str(marks)]  # fmt: skip
    return endpoint, command, env


def test_a_node_joins_at_the_next_round_its_loss_leaves_the_other_to_go_on_and_it_comes_back(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    endpoint, command, env = _command(hosts, script, marks)
    processes = [hosts.hosts[0].start(command, env)]
    waited: AssertionError | None = None
    try:
        _wait_for(marks, "world1-rank0-count0", processes, 90)  # node 1 alone: the least is 1
        processes.append(hosts.hosts[1].start(command, env))
        # Node 2 joins: both restart into a round of two (not a restart used: one is left for the loss).
        _wait_for(marks, "world2-rank1-count1", processes, 90)
        _wait_for(marks, "world2-rank0-count1", processes, 30)
        killed = time.monotonic()
        kill_host(hosts.hosts[1].namespace)
        shrunk = _wait_for(marks, "world1-rank0-count2", processes, 60)
        # Node 2 started again: it joins at the next round, though the one restart is used.
        processes.append(hosts.hosts[1].start(command, env))
        _wait_for(marks, "world2-rank1-count3", processes, 90)
        _wait_for(marks, "world2-rank0-count3", processes, 30)
        (marks / "stop").touch()
    except AssertionError as exc:
        waited = exc
    finally:
        results = finish(processes, timeout=60)
    assert waited is None, f"{waited}\n" + "\n".join(out + err for _, out, err in results)
    (code, out, err), (_, out2, _), (again, out3, err3) = results
    assert code == 0 and again == 0, out + err + out3 + err3
    rounds = re.findall(r"round rank=(\d) world=(\d) count=(\d)", out + out2 + out3)
    assert sorted(rounds) == [("0", "1", "0"), ("0", "1", "2"), ("0", "2", "1"), ("0", "2", "3"), ("1", "2", "1"),
                              ("1", "2", "3")], out + out2 + out3  # fmt: skip
    assert err.count("restart 1 of 1") == 1, err  # the node's loss used the restart, node 2's joining did not
    # Each round's config says which round, which nodes and why that world size.
    for count, nodes, addresses in (("0", 1, [0]), ("1", 2, [0, 1]), ("2", 1, [0]), ("3", 2, [0, 1])):
        came = ", ".join(f"node {rank} {hosts.hosts[rank].address}" for rank in addresses)
        note = (f"note=round {count} of the c10d rendezvous at {endpoint}: {nodes} node(s) (--nnodes 1:2) came "
                f"({came}); world size {nodes} = {nodes} node(s) x 1 rank(s) per node")  # fmt: skip
        assert f"round rank=0 world={nodes} count={count} {note}" in out, out
    assert f"why world_size: environment the c10d rendezvous at {endpoint}" in out, out
    print(f"\nfrom kill -9 of host 2 to the shrunk round's first step: {shrunk - killed:.1f} s")
    assert shrunk - killed < 30, shrunk - killed


def test_a_node_whose_link_is_cut_is_dropped_and_the_other_goes_on_alone(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    _, command, env = _command(hosts, script, marks)
    processes = [host.start(command, env) for host in hosts.hosts]
    waited: AssertionError | None = None
    try:
        _wait_for(marks, "world2-rank1-count*", processes, 90)
        trained = {mark.name for mark in marks.iterdir()}
        cut = time.monotonic()
        second = hosts.hosts[1]
        subprocess.run(["ip", "-n", second.namespace, "link", "set", second.interface, "down"], check=True, timeout=30)
        # Node 1's ranks block on node 2 (no socket closes): the rendezvous drops node 2, node 1 goes on alone.
        shrunk = _wait_for_new(marks, trained, processes, 30)
        kill_host(second.namespace)  # lost for good: what it does cut off is not this test's
        (marks / "stop").touch()
    except AssertionError as exc:
        waited = exc
    finally:
        results = finish(processes, timeout=60)
    assert waited is None, f"{waited}\n" + "\n".join(out + err for _, out, err in results)
    code, out, err = results[0]
    assert code == 0, out + err
    named = (
        f"the rendezvous dropped node 1 ({second.hostname} at {second.address}: rank 1) of this round (no keep-alive)"
    )
    assert f"{named}: this node's ranks stopped" in err, err
    assert "restart 1 of 1" not in err, err  # not a failure of a rank here: no restart used
    print(f"\nfrom the link cut to the shrunk round's first step: {shrunk - cut:.1f} s")


def _wait_for_new(folder: Path, seen: set[str], processes: list[Any], seconds: float) -> float:
    """A world-1 mark of node 1 not among ``seen`` (node 1 may have trained alone before node 2 came)."""
    deadline = time.monotonic() + seconds
    while not {m.name for m in folder.glob("world1-rank0-count*")} - seen:
        assert time.monotonic() < deadline, f"no new round of one node within {seconds} s"
        assert processes[0].poll() is None, "node 1's launcher ended"
        time.sleep(0.05)
    return time.monotonic()
