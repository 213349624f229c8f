"""``runtime.launch(fn, num_nodes=N, max_restarts=K, master_addr=HOST, master_port=PORT)`` started with
``python`` on two hosts (network namespaces, own addresses and host names, no DNS entries) restarts
every node together, as ``resolver run --nnodes N --rdzv-endpoint HOST:PORT --max-restarts K`` does; and
the multi-node commands of docs/usage.md and docs/runtime.md run as written on those hosts (the blocks
whose skip note names this file: the docs tests cannot make hosts)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

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

ROOT = Path(__file__).resolve().parents[3]
PAGES = ("docs/usage.md", "docs/runtime.md")
#: A console block whose skip note names this file: its commands are the ones run here.
MARKED = re.compile(r'<!-- skip: next "[^"]*test_two_hosts_launch\.py[^"]*" -->\n```console\n(.*?)^```', re.S | re.M)
#: The endpoint the pages show, replaced by the first host's address and a free port.
SHOWN_ADDRESS, SHOWN_PORT = "10.0.0.1", "29400"


def _commands() -> list[str]:
    """Each ``$`` line of the marked blocks, once (both pages show some of the same)."""
    commands: list[str] = []
    for page in PAGES:
        for body in MARKED.findall((ROOT / page).read_text(encoding="utf-8")):
            commands += [line[2:] for line in body.splitlines() if line.startswith("$ ") and line[2:] not in commands]
    return commands


_why_not = missing_prerequisite()
#: The tests that make two hosts: skipped where they cannot be made, unless CI requires them.
on_two_hosts = pytest.mark.skipif(
    _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1",
    reason=f"two hosts as network namespaces: {_why_not}",
)


def _environment() -> dict[str, str]:
    env = {**host_environment(), "RUNTIME_RENDEZVOUS_TIMEOUT": "60"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # this interpreter's python and resolver
    return env


#: Fails once on the host named in argv[1] (attempt 0 only); the launching process prints launch()'s result.
SCRIPT = """
import os, socket, sys
import runtime, torch

def work(strategy):
    count = os.environ["TORCHELASTIC_RESTART_COUNT"]
    total = strategy.collective.all_reduce(torch.ones(1))
    print(f"first-step rank={strategy.global_rank} count={count}", flush=True)
    if count == "0" and socket.gethostname() == sys.argv[1]:
        raise RuntimeError("planned failure on the second host")
    total = strategy.collective.all_reduce(total)
    return f"rank={strategy.global_rank} count={strategy.restart_count} sum={total.item()}"

if __name__ == "__main__":
    result = runtime.launch(work, accelerator="cpu", devices=1, num_nodes=2, max_restarts=1,
                            master_addr=sys.argv[2], master_port=int(sys.argv[3]))
    print(f"RESULT {result} pid={os.getpid()}", flush=True)
"""


def test_the_pages_show_the_multi_node_commands_this_file_runs() -> None:
    commands = _commands()
    assert any(c.startswith("resolver run --nnodes 2 ") and "--max-restarts" in c for c in commands), commands
    assert any(c.startswith("resolver run --nnodes 1:2 ") for c in commands), commands
    assert any(c.startswith("python ") and "--master-addr" in c for c in commands), commands
    for page in PAGES:
        assert MARKED.search((ROOT / page).read_text(encoding="utf-8")), f"{page} shows no command run here"


@on_two_hosts
def test_a_rank_failing_on_node_2_restarts_both_nodes_and_launch_returns_the_result_on_each(
    hosts: TwoHosts, tmp_path: Path
) -> None:
    script = tmp_path / "nodes.py"
    script.write_text(SCRIPT)
    address, port = hosts.hosts[0].address, str(find_free_port())
    command = [sys.executable, str(script), hosts.hosts[1].hostname, address, port]
    results = finish([host.start(command, _environment()) for host in hosts.hosts], timeout=200)
    both = "\n".join(out + err for _, out, err in results)
    assert [code for code, _, _ in results] == [0, 0], both
    assert "RuntimeError: planned failure on the second host" in both, both
    # Every rank of each round saw the same TORCHELASTIC_RESTART_COUNT: 0, then 1 after the restart.
    firsts = sorted(re.findall(r"first-step rank=(\d) count=(\d)", both))
    assert firsts == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")], both
    # launch() returned the node's first rank's result in the launching process, once per node.
    results_by_host = [re.findall(r"^RESULT (.*) pid=\d+$", out, re.M) for _, out, _ in results]
    assert sorted(results_by_host) == [["rank=0 count=1 sum=4.0"], ["rank=1 count=1 sum=4.0"]], both


#: Steps until a file ``stop`` appears in argv[1], marking each round's first step there; num_nodes=(1, 2).
ELASTIC_SCRIPT = """
import os, sys, time
import runtime, torch

def work(strategy, folder):
    world, count = strategy.world_size, strategy.restart_count
    open(os.path.join(folder, f"world{world}-rank{strategy.global_rank}-count{count}"), "w").close()
    while True:
        flag = strategy.collective.all_reduce(torch.tensor([float(os.path.exists(os.path.join(folder, "stop")))]))
        if flag.item() > 0:
            return f"world={world} count={count}"
        time.sleep(0.1)

if __name__ == "__main__":
    result = runtime.launch(work, sys.argv[1], accelerator="cpu", devices=1, num_nodes=(1, 2), max_restarts=1,
                            master_addr=sys.argv[2], master_port=int(sys.argv[3]))
    print(f"RESULT {result}", flush=True)
"""


def _wait_for(folder: Path, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not (folder / name).exists():
        assert time.monotonic() < deadline, f"no {name} within {seconds} s: {sorted(p.name for p in folder.iterdir())}"
        time.sleep(0.05)


@on_two_hosts
def test_with_a_range_of_nodes_node_1_goes_on_alone_once_node_2_is_killed(hosts: TwoHosts, tmp_path: Path) -> None:
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC_SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    command = [sys.executable, str(script), str(marks), hosts.hosts[0].address, str(find_free_port())]
    processes = [host.start(command, _environment()) for host in hosts.hosts]
    waited: AssertionError | None = None
    try:
        _wait_for(marks, "world2-rank0-count0", 120)
        _wait_for(marks, "world2-rank1-count0", 30)
        kill_host(hosts.hosts[1].namespace)  # every process of node 2: its launcher and its rank
        _wait_for(marks, "world1-rank0-count1", 60)  # node 1 alone, its one restart used
        (marks / "stop").touch()
    except AssertionError as exc:
        waited = exc
    finally:
        results = finish(processes, timeout=60)
    (code, out, err), _ = results
    assert waited is None and code == 0, f"{waited}\n{out}{err}"
    assert re.findall(r"^RESULT (.*)$", out, re.M) == ["world=1 count=1"], out + err


@on_two_hosts
@pytest.mark.parametrize("command", _commands())
def test_each_multi_node_command_of_the_docs_runs_as_written_on_two_hosts(
    hosts: TwoHosts, command: str, tmp_path: Path
) -> None:
    endpoint = f"{hosts.hosts[0].address}:{find_free_port()}"
    shown = command.replace(f"{SHOWN_ADDRESS}:{SHOWN_PORT}", endpoint)
    shown = shown.replace(f"--master-addr {SHOWN_ADDRESS}", f"--master-addr {hosts.hosts[0].address}")
    shown = shown.replace(f"--master-port {SHOWN_PORT}", f"--master-port {endpoint.rsplit(':', 1)[1]}")
    assert SHOWN_ADDRESS not in shown and SHOWN_PORT not in shown, f"an endpoint this test does not know: {command}"
    argv = ["bash", "-c", f"cd {shlex.quote(str(ROOT))} && {shown}"]
    results = finish([host.start(argv, _environment()) for host in hosts.hosts], timeout=200)
    both = "\n".join(out + err for _, out, err in results)
    assert [code for code, _, _ in results] == [0, 0], both
    summaries = [line for _, out, _ in results for line in out.splitlines() if "RESULT " in line]
    assert len(summaries) == 1 and '"world_size": 2' in summaries[0], both  # rank 0's, on both nodes together


#: Steps until pre-empted (SIGUSR1 to a launching process), saving a checkpoint at the agreed step; the
#: launching process prints the PreemptedError launch() raises.
PREEMPT_SCRIPT = """
import os, sys, time
import runtime, torch

def work(strategy, folder):
    for step in range(100000):
        if strategy.preempted(step):
            strategy.save_checkpoint(os.path.join(folder, f"step-{step}"), {"step": step})
            return step
        strategy.collective.all_reduce(torch.ones(1))
        if step == 3:
            open(os.path.join(folder, f"stepping-{strategy.global_rank}"), "w").close()
        time.sleep(0.05)

if __name__ == "__main__":
    try:
        runtime.launch(work, sys.argv[1], accelerator="cpu", devices=1, num_nodes=2, max_restarts=1,
                       master_addr=sys.argv[2], master_port=int(sys.argv[3]),
                       strategy_options={"preemption_signal": "SIGUSR1"})
    except runtime.PreemptedError as exc:
        print(f"PREEMPTED step={exc.step} checkpoint={exc.checkpoint}", flush=True)
        sys.exit(exc.exit_code)
"""


@on_two_hosts
def test_a_pre_emption_signal_to_one_node_raises_preempted_error_on_both_at_the_same_step(
    hosts: TwoHosts, tmp_path: Path
) -> None:
    script = tmp_path / "preempt.py"
    script.write_text(PREEMPT_SCRIPT)
    address, port = hosts.hosts[0].address, str(find_free_port())
    command = [sys.executable, str(script), str(tmp_path), address, port]
    processes = [host.start(command, _environment()) for host in hosts.hosts]
    try:
        _wait_for(tmp_path, "stepping-0", 120)
        _wait_for(tmp_path, "stepping-1", 30)
    except AssertionError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            finish(processes, timeout=1)  # kills them
        raise
    processes[1].send_signal(signal.SIGUSR1)  # the second host's launching process (exec'd by ip netns, unshare, sh)
    results = finish(processes, timeout=90)
    both = "\n".join(out + err for _, out, err in results)
    assert [code for code, _, _ in results] == [75, 75], both
    said = [re.findall(r"^PREEMPTED step=(\d+) checkpoint=(.*)$", out, re.M) for _, out, _ in results]
    assert len(said[0]) == 1 and said[0] == said[1], both  # the same step and checkpoint on both nodes
    step, checkpoint = said[0][0]
    assert checkpoint == str(tmp_path / f"step-{step}") and Path(checkpoint).exists(), both
