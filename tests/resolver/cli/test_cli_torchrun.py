"""torchrun's options on `resolver run`: the same command line works with torchrun's meaning, each
option read into a flag (and said so), and a torchrun option with no equivalent is an error."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import run_resolver

pytestmark = pytest.mark.timeout(240)

#: A plain torch-free script written for torchrun: it prints the variables a worker reads.
VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
             "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")  # fmt: skip
SHOW = f"""\
import json, os
names = {VARIABLES!r} + ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
print("VARS " + json.dumps({{n: os.environ.get(n) for n in names}}) + "\\n", end="", flush=True)
"""


@pytest.fixture
def show(tmp_path: Path) -> Path:
    path = tmp_path / "show.py"
    path.write_text(SHOW)
    return path


def _seen(stdout: str) -> list[dict[str, str | None]]:
    # torchrun does not keep the ranks' lines whole: two may share a line
    found = [json.loads(match) for match in re.findall(r"VARS (\{[^{}]*\})", stdout)]
    return sorted(found, key=lambda v: str(v["RANK"]))


def test_a_torchrun_command_line_gives_the_script_what_torchrun_gives_it(show: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    line = ["--nproc-per-node", "2", "--standalone", str(show)]
    ours = run_resolver("run", *line)
    theirs = subprocess.run([str(torchrun), *line], capture_output=True, text=True, timeout=180)
    assert ours.returncode == 0 and theirs.returncode == 0, ours.stderr + theirs.stderr
    ours_seen, theirs_seen = _seen(ours.stdout), _seen(theirs.stdout)
    assert len(ours_seen) == len(theirs_seen) == 2
    for mine, torchs in zip(ours_seen, theirs_seen, strict=True):
        assert {n: mine[n] for n in VARIABLES} == {n: torchs[n] for n in VARIABLES}
        # The rendezvous itself differs only in spelling (127.0.0.1 vs localhost) and the free port.
        assert mine["MASTER_ADDR"] in ("127.0.0.1", "localhost") and mine["MASTER_PORT"]
        assert mine["TORCHELASTIC_RUN_ID"]  # a fresh id per run, as torchrun's standalone run
    assert ours_seen[0]["TORCHELASTIC_RUN_ID"] == ours_seen[1]["TORCHELASTIC_RUN_ID"]
    assert "resolver: --nproc-per-node 2 read as --devices 2" in ours.stderr


def test_the_rendezvous_options_read_as_flags(show: Path) -> None:
    from runtime._protocol.ports import find_free_port

    port = find_free_port()
    done = run_resolver("run", "--nproc_per_node", "2", "--nnodes", "1:1", "--rdzv-backend", "c10d",
                        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job7", "--role", "trainer",
                        "--max-restarts", "0", "--start-method", "spawn", "--run-path", str(show))  # fmt: skip
    assert done.returncode == 0, done.stderr
    for line in ("--nproc-per-node 2 read as --devices 2", "--nnodes 1:1 read as --num-nodes 1",
                 f"--rdzv-endpoint 127.0.0.1:{port} read as --master-addr 127.0.0.1",
                 f"--rdzv-endpoint 127.0.0.1:{port} read as --master-port {port}"):  # fmt: skip
        assert f"resolver: {line}" in done.stderr
    seen = _seen(done.stdout)
    assert [v["RANK"] for v in seen] == ["0", "1"]
    assert {v["TORCHELASTIC_RUN_ID"] for v in seen} == {"job7"}
    assert {v["ROLE_NAME"] for v in seen} == {"trainer"}
    assert {v["MASTER_PORT"] for v in seen} == {str(port)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--monitor-interval", "5"], "torchrun's --monitor-interval has no equivalent in resolver run"),
        (["--rdzv_conf", "join_timeout"], "--rdzv-conf 'join_timeout': 'join_timeout' is not KEY=VALUE"),
        (["--local-addr", "10.0.0.1"], "torchrun's --local-addr has no equivalent in resolver run"),
        (["--nnodes", "4:1"], "--nnodes 4:1: the least number of nodes (4) is above the most (1)"),
        (["--nnodes", "0:2"], "--nnodes '0': expected a whole number of at least 1"),
        (["--nproc-per-node", "two"], "--nproc-per-node 'two': expected a whole number"),
        (["--nproc-per-node", "2", "--devices", "3"], "--nproc-per-node 2 says devices=2, but --devices says 3"),
        (["--max-restarts", "two"], "--max-restarts two: not a number of restarts"),
        (["--start-method", "fork"], "every rank of resolver run is a new interpreter"),
        (["--rdzv-backend", "etcd"], "it has no etcd rendezvous"),
        (["--standalone", "--nnodes", "2"], "--standalone runs one node, but the run asks for 2 nodes"),
        (["--redirects", "0:1,1:2"], "per-rank values (0:1,1:2) are not supported"),
        (["--no-python", "-m"], "--no-python and -m cannot go together"),
    ],
)
def test_a_torchrun_option_that_cannot_work_here_says_so(show: Path, options: list[str], message: str) -> None:
    done = run_resolver("run", *options, str(show))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "= help:" in done.stderr and "Traceback" not in done.stderr
    assert "VARS" not in done.stdout  # nothing started


def test_no_python_runs_a_program_once_per_rank() -> None:
    echo = shutil.which("sh")
    assert echo is not None
    done = run_resolver("run", "--nproc-per-node", "2", "--no-python", echo, "-c", 'echo "hello from $RANK"')
    assert done.returncode == 0, done.stderr
    assert sorted(line for line in done.stdout.splitlines() if "hello" in line) == [
        "[rank 0]: hello from 0", "[rank 1]: hello from 1"]  # fmt: skip
    missing = run_resolver("run", "--no-python", "no-such-program-here")
    assert missing.returncode == 2 and "program 'no-such-program-here' not found" in missing.stderr


def test_redirects_keep_a_stream_off_the_console_and_in_the_logs(show: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = run_resolver("run", "--nproc-per-node", "2", "-r", "1", "--log-dir", str(logs), str(show))
    assert done.returncode == 0, done.stderr
    assert "VARS" not in done.stdout
    assert all("VARS {" in (logs / f"rank_{rank}.log").read_text() for rank in (0, 1))


NODES = ["--nnodes", "2", "--max-restarts", "1", "--rdzv-endpoint", "127.0.0.1:29400"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rdzv-conf", "join_timeout=5"], "--rdzv-conf join_timeout=5: it sets torch's c10d rendezvous, which "
         "resolver run joins only when several nodes restart together; this run has 1 node(s) and --max-restarts 0"),
        ([*NODES, "--rdzv-conf", "join_timout=5"], "--rdzv-conf join_timout=5: torch's c10d rendezvous has no "
         "setting 'join_timout'"),
        ([*NODES, "--rdzv-conf", "is_host=maybe"], "--rdzv-conf is_host=maybe: not a yes or no"),
        ([*NODES, "--rdzv-conf", "read_timeout=-1"], "--rdzv-conf read_timeout=-1: not a whole number above 0"),
        ([*NODES, "--rdzv-backend", "static"], "--rdzv-backend static: 2 nodes with --max-restarts 1 restart "
         "together through torch's c10d rendezvous"),
    ],
)  # fmt: skip
def test_a_rendezvous_setting_nodes_restarting_together_cannot_use_says_what_and_the_fix(
    show: Path, options: list[str], message: str
) -> None:
    done = run_resolver("run", "--accelerator", "cpu", "--devices", "1", *options, str(show))
    assert done.returncode == 1, done.stderr
    assert message in done.stderr
    assert "help:" in done.stderr and "Traceback" not in done.stderr
    assert "VARS" not in done.stdout  # nothing started
