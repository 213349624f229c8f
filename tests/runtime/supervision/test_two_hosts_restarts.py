"""Two hosts (network namespaces, own addresses and host names, no DNS entries) whose nodes restart
together: ``resolver run --nnodes 2 --rdzv-endpoint HOST:PORT --max-restarts K`` on each joins torch's
c10d elastic rendezvous, with no network setting given by hand. A rank's failure on one node restarts
every rank on both, with one restart count; a failure that must not restart ends both with one reason."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime._protocol.ports import find_free_port
from tests.support.two_hosts_support import REQUIRE_VARIABLE, TwoHosts, finish, host_environment, missing_prerequisite

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

_why_not = missing_prerequisite()
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"two hosts as network namespaces: {_why_not}", allow_module_level=True)

#: Fails once on the host named in argv[1] at step 2 (attempt 0 only); prints each rank's attempt.
SCRIPT = """
import os, socket, sys, time
import runtime, torch

def work(strategy):
    count = os.environ["TORCHELASTIC_RESTART_COUNT"]
    for step in range(4):
        total = torch.ones(1)
        strategy.collective.all_reduce(total)
        if step == 0:
            print(f"first-step rank={strategy.global_rank} count={count} at={time.time():.3f}", flush=True)
            if len(sys.argv) > 3:
                open(os.path.join(sys.argv[3], f"up-{strategy.global_rank}"), "w").close()
        if step == 2 and count == "0" and socket.gethostname() == sys.argv[1]:
            print(f"dies rank={strategy.global_rank} at={time.time():.3f}", flush=True)
            raise RuntimeError("planned failure at step 2")
        if sys.argv[2] == "hang":
            time.sleep(3600)
    print(f"done rank={strategy.global_rank} count={count} sum={total.item()}", flush=True)

runtime.launch(work, accelerator="cpu", devices=1, num_nodes=2)  # what torchrun's ranks cannot read from resolver run
"""


def _start(hosts: TwoHosts, script: Path, mode: str, extra: list[list[str]], *more: str) -> list[Any]:
    endpoint = f"{hosts.hosts[0].address}:{find_free_port()}"
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": "60"}
    processes = []
    for host, options in zip(hosts.hosts, extra, strict=True):
        command = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--nproc-per-node", "1",
                   "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "job-38",
                   "--max-restarts", "1", *options, str(script), hosts.hosts[1].hostname, mode, *more]  # fmt: skip
        processes.append(host.start(command, env))
    return processes


def _run(hosts: TwoHosts, script: Path, mode: str, extra: list[list[str]]) -> list[tuple[int, str, str]]:
    return finish(_start(hosts, script, mode, extra), timeout=200)


def _lines(results: list[tuple[int, str, str]], word: str) -> list[str]:
    return [line for _, out, _ in results for line in out.splitlines() if f"]: {word} " in line]


def test_a_rank_failing_on_node_2_restarts_every_rank_on_both_hosts_with_one_restart_count(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # torchrun's --node-rank, given to one node: the rendezvous numbers the nodes, and the launcher says so.
    results = _run(hosts, script, "train", [["--node-rank", "1"], []])
    for code, out, err in results:
        assert code == 0, out + err
    assert "resolver run: node rank 1 (--node-rank or NODE_RANK) is not kept" in results[0][2]
    both = "".join(out + err for _, out, err in results)
    assert "RuntimeError: planned failure at step 2" in both, both
    # Every rank of each round saw the same TORCHELASTIC_RESTART_COUNT: 0, then 1 after the restart.
    firsts = sorted(re.findall(r"first-step rank=(\d) count=(\d)", both))
    assert firsts == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")], both
    assert sorted(re.findall(r"done rank=(\d) count=(\d) sum=(\S+)", both)) == [("0", "1", "2.0"), ("1", "1", "2.0")]
    dies = float(re.search(r"dies rank=\d at=(\S+)", both).group(1))  # type: ignore[union-attr]
    again = max(float(at) for at in re.findall(r"first-step rank=\d count=1 at=(\S+)", both))
    print(f"\nfrom the rank's death to the restarted group's first step: {again - dies:.1f} s")


def test_a_timeout_on_one_host_ends_both_with_the_same_reason(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # Every rank hangs after its first step; only the second host's launcher has a timeout.
    results = _run(hosts, script, "hang", [[], ["--timeout", "20"]])
    ends = [re.findall(r"resolver run: the run ended on every node: (.*)", err) for _, _, err in results]
    assert all(len(found) == 1 for found in ends), results
    assert ends[0] == ends[1], ends
    assert f"({hosts.hosts[1].hostname}): rank " in ends[0][0], ends
    assert "did not finish within the 20 s launch timeout" in ends[0][0], ends
    assert results[1][0] == 124, results[1]
    assert results[0][0] == 1, results[0]


def test_sigterm_to_one_hosts_launcher_ends_both_with_the_same_reason(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    processes = _start(hosts, script, "hang", [[], []], str(marks))
    try:
        deadline = time.monotonic() + 150
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in processes), "a node ended before its rank trained"
            time.sleep(0.1)
        processes[1].send_signal(signal.SIGTERM)  # the second host's resolver run (exec'd by ip netns, unshare, sh)
    finally:
        results = finish(processes, timeout=120)
    ends = [re.findall(r"resolver run: the run ended on every node: (.*)", err) for _, _, err in results]
    assert ends[0] == ends[1] and len(ends[0]) == 1, results
    assert f"({hosts.hosts[1].hostname}): its launcher was stopped by SIGTERM" in ends[0][0], ends
    assert [code for code, _, _ in results] == [1, 143], results


@pytest.mark.skipif(not Path(sys.executable).with_name("torchrun").exists(), reason="torchrun is not installed")
def test_a_torchrun_node_and_a_resolver_run_node_form_one_job(hosts, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    endpoint = f"{hosts.hosts[0].address}:{find_free_port()}"
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": "60"}
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
              "--rdzv-id", "job-38", "--max-restarts", "1"]  # fmt: skip
    resolver_node = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", *common]
    # torchrun on a host without a DNS name needs these by hand (resolver run finds them itself).
    torchrun_node = [str(Path(sys.executable).with_name("torchrun")), *common, "--rdzv-conf", "is_host=0",
                     "--local-addr", hosts.hosts[1].address]  # fmt: skip
    commands = [[*resolver_node, str(script), "nobody", "train"], [*torchrun_node, str(script), "nobody", "train"]]
    results = finish([host.start(command, env) for host, command in zip(hosts.hosts, commands, strict=True)], 200)
    assert [code for code, _, _ in results] == [0, 0], "\n".join(out + err for _, out, err in results)
    both = "".join(out for _, out, _ in results)
    assert sorted(re.findall(r"done rank=(\d) count=(\d) sum=(\S+)", both)) == [("0", "0", "2.0"), ("1", "0", "2.0")]
