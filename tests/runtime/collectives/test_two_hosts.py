"""Two hosts on one machine (network namespaces, each with its own address and host name, neither
name resolvable): a 2-node run through ``runtime.launch``, ``resolver run`` and ``torchrun``, with
no network variable set by hand. Gloo alone would bind to the loopback address there (it cannot
resolve the host's name) and fail after its timeout; the runtime binds it to the interface that
routes to the main address, and a main address no interface reaches is an error at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime._protocol.ports import find_free_port
from tests.support.two_hosts_support import REQUIRE_VARIABLE, Host, TwoHosts, finish, missing_prerequisite

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

_why_not = missing_prerequisite()
if _why_not is not None and os.environ.get(REQUIRE_VARIABLE) != "1":
    pytest.skip(f"two hosts as network namespaces: {_why_not}", allow_module_level=True)

REPOSITORY = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, socket, sys
import runtime, torch

def work(strategy):
    total = torch.tensor([float(strategy.global_rank + 1)])
    strategy.collective.all_reduce(total)
    chosen = getattr(strategy.collective, "socket_interface", None)
    print(json.dumps({"host": socket.gethostname(), "rank": strategy.global_rank, "sum": total.item(),
                      "interface": None if chosen is None else chosen.name}), flush=True)

runtime.launch(work, accelerator="cpu", devices=1, num_nodes=2, timeout=120)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GLOO_", "MASTER_", "RESOLVER_", "SLURM_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    env["RUNTIME_RENDEZVOUS_TIMEOUT"] = "60"
    env.update(extra)
    return env


def _run_on_both(hosts: TwoHosts, commands: list[list[str]], envs: list[dict[str, str]]) -> list[tuple[int, str, str]]:
    return finish([host.start(argv, env) for host, argv, env in zip(hosts.hosts, commands, envs, strict=True)])


def _reports(results: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    reports = []
    for code, out, err in results:
        assert code == 0, out + err
        lines = [line[line.index("{") :] for line in out.splitlines() if '{"host"' in line]
        assert len(lines) == 1, out + err
        reports.append(json.loads(lines[0]))
    return reports


def _node_env(hosts: TwoHosts, node: int, port: int, **extra: str) -> dict[str, str]:
    main = hosts.hosts[0].address
    return _environment(NODE_RANK=str(node), MASTER_ADDR=main, MASTER_PORT=str(port), **extra)


def _expect_both_nodes(hosts: TwoHosts, reports: list[dict[str, Any]], interfaces: list[str | None]) -> None:
    assert [(r["host"], r["rank"], r["sum"]) for r in reports] == [("node-0", 0, 3.0), ("node-1", 1, 3.0)]
    assert [r["interface"] for r in reports] == interfaces


def test_runtime_launch_across_two_hosts_binds_gloo_to_the_interface_that_reaches_rank_0(hosts, script):
    port = find_free_port()
    commands = [[sys.executable, str(script)]] * 2
    results = _run_on_both(hosts, commands, [_node_env(hosts, 0, port), _node_env(hosts, 1, port)])
    _expect_both_nodes(hosts, _reports(results), [h.interface for h in hosts.hosts])


def test_a_users_gloo_socket_ifname_wins(hosts, script):
    port = find_free_port()
    envs = [_node_env(hosts, node, port, GLOO_SOCKET_IFNAME=host.interface) for node, host in enumerate(hosts.hosts)]
    results = _run_on_both(hosts, [[sys.executable, str(script)]] * 2, envs)
    _expect_both_nodes(hosts, _reports(results), [None, None])  # nothing chosen: the user's setting stands


def test_resolver_run_across_two_hosts(hosts, script):
    port = find_free_port()
    main = hosts.hosts[0].address
    resolver_cli = [sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "1"]
    commands = [
        [*resolver_cli, "--num-nodes", "2", "--node-rank", str(node), "--master-addr", main,
         "--master-port", str(port), str(script)]
        for node in range(2)
    ]  # fmt: skip
    results = _run_on_both(hosts, commands, [_environment(), _environment()])
    _expect_both_nodes(hosts, _reports(results), [h.interface for h in hosts.hosts])


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
    reason="torchrun is not installed",
)
def test_torchrun_across_two_hosts(hosts, script):
    port = find_free_port()
    main = hosts.hosts[0].address
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    commands = [
        [torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node), "--master-addr", main,
         "--master-port", str(port), str(script)]
        for node in range(2)
    ]  # fmt: skip
    results = _run_on_both(hosts, commands, [_environment(), _environment()])
    _expect_both_nodes(hosts, _reports(results), [h.interface for h in hosts.hosts])


def test_a_main_address_no_interface_reaches_fails_at_once_naming_host_and_address(hosts, script):
    unreachable = f"{hosts.subnet.rsplit('.', 1)[0]}.251.1"  # another subnet: no route from either host
    host: Host = hosts.hosts[1]
    env = _environment(NODE_RANK="1", MASTER_ADDR=unreachable, MASTER_PORT=str(find_free_port()))
    process = host.start([sys.executable, str(script)], env)
    out, err = process.communicate(timeout=120)
    assert process.returncode != 0
    text = out + err
    assert f"no network interface of this host (node-1) routes to the main address {unreachable}" in text, text
    assert "GLOO_SOCKET_IFNAME" in text
    # The script does not catch it: the launch's own error ends it, not gloo's after a wait.
    assert "runtime.errors.RankFailedError: rank 1 failed: error: no network" in text, text
    assert "connectFullMesh" not in text and "Timed out" not in text, text


TRAIN_UNTIL_KILLED = """
import os, pathlib, sys, time
import runtime, torch

def work(strategy):
    out = pathlib.Path(sys.argv[1])
    for step in range(1_000_000):
        strategy.collective.all_reduce(torch.ones(1))
        if step == 20:
            (out / f"step-{strategy.global_rank}").write_text(str(os.getpid()))
        time.sleep(0.01)

runtime.launch(work, accelerator="cpu", devices=2, num_nodes=2, timeout=120)
"""


def test_when_every_process_of_node_1_is_killed_node_0_names_its_ranks_and_host(hosts, tmp_path):
    script = tmp_path / "train_until_killed.py"
    script.write_text(TRAIN_UNTIL_KILLED)
    out = tmp_path / "out"
    out.mkdir()
    port = find_free_port()
    command = [sys.executable, str(script), str(out)]
    processes = [host.start(command, _node_env(hosts, node, port)) for node, host in enumerate(hosts.hosts)]
    try:
        deadline = time.monotonic() + 200
        while len(list(out.glob("step-*"))) < 4 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in processes), "a node ended before every rank trained"
            time.sleep(0.1)
        # kill -9 of every process of node 1: its launcher (rank 2) and rank 3; nothing can tell node 0.
        listed = subprocess.run(["ip", "netns", "pids", hosts.hosts[1].namespace], capture_output=True, text=True)
        for pid in listed.stdout.split():
            os.kill(int(pid), signal.SIGKILL)
    finally:
        results = finish(processes, timeout=120)
    code, _, err = results[0]
    assert code == 1, err
    node_1 = hosts.hosts[1]
    assert f"PeerLostError: a rank on node 1 (host node-1 at {node_1.address}: ranks 2, 3) went away: rank " in err, err
    assert "'s connection to it ended (" in err and f"[{node_1.address}]:" in err, err  # gloo's words, its address
    assert "rank 0 failed" not in err and "rank 1 failed" not in err, err
