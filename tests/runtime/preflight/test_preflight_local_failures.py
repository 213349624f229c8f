"""``resolver check`` (and ``resolver run``) on this machine with a rendezvous that cannot work: a
busy port, a main address that does not resolve or is not this host's. Found before a rank starts,
named with where the value came from (the option typed, the variable) and what holds the port."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime._protocol.ports import find_free_port
from runtime.errors import PortInUseError
from runtime.preflight.rank_output import last_meaningful_line
from tests.runtime.preflight.test_preflight import HOST, _by_name, _check, _env

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port this test process listens on."""
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_check_on_a_busy_master_port_names_the_option_and_the_process_holding_it(busy_port):
    code, report, err, _ = _check("--devices", "2", "--master-port", str(busy_port), timeout="30")
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert failed["blame"] == [0]
    assert f"rank 0 on {HOST} cannot listen on port {busy_port} (from --master-port)" in failed["detail"]
    assert f"(pid {os.getpid()}: " in failed["detail"]  # this test's process holds it
    assert "no rank was started" in failed["detail"] and "hung" not in failed["detail"]
    assert failed["fix"].startswith("pass --master-port a free port, or leave --master-port out")
    assert [c["status"] for c in report["checks"][1:]] == ["skip"] * 8


def test_check_on_a_busy_port_from_master_port_hints_the_variable(busy_port):
    code, report, err, _ = _check("--devices", "2", timeout="30", env=_env(MASTER_PORT=str(busy_port)))
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert f"cannot listen on port {busy_port} (from MASTER_PORT)" in failed["detail"]
    assert failed["fix"].startswith("set MASTER_PORT to a free port, or unset it")


def test_check_with_a_main_address_that_does_not_resolve_starts_no_rank():
    code, report, err, _ = _check("--devices", "2", timeout="30", env=_env(MASTER_ADDR="nosuchhost.invalid"))
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert failed["blame"] == [0, 1]
    assert (
        f"ranks 0-1 on {HOST}: this host ({HOST}) cannot resolve the main address 'nosuchhost.invalid'"
        in (failed["detail"])
    )
    assert "frame #" not in json.dumps(report) + err


def test_check_with_a_main_address_of_another_machine_starts_no_rank():
    # TEST-NET-1 (RFC 5737): never an address of this host
    code, report, err, _ = _check("--devices", "2", timeout="30", env=_env(MASTER_ADDR="192.0.2.1"))
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert f"rank 0 on {HOST}: the main address 192.0.2.1 is not an address of this host" in failed["detail"]
    assert "MASTER_ADDR" in failed["fix"]


@pytest.mark.parametrize(
    ("given", "env", "source", "hint"),
    [
        (["--master-port"], {}, "--master-port", "pass --master-port a free port"),
        ([], {"MASTER_PORT": ""}, "MASTER_PORT", "set MASTER_PORT to a free port"),
    ],
)
def test_run_on_a_busy_port_hints_where_the_port_came_from(busy_port, tmp_path: Path, given, env, source, hint):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    args = [*given, str(busy_port)] if given else []
    env = _env(**{k: str(busy_port) for k in env})
    done = subprocess.run([sys.executable, "-m", "resolver", "run", *args, "--devices", "2", "--accelerator", "cpu",
                           str(script)], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"error: port {busy_port} on 127.0.0.1 (from {source}) is already in use by another process" in done.stderr
    assert f"(pid {os.getpid()}: " in done.stderr
    assert f"  = help: {hint}" in done.stderr
    assert "ran" not in done.stdout


def test_a_rank_started_by_someone_else_prints_no_cpp_log_of_torchs_retries():
    # rank 0 of two, started by hand (as srun or torchrun start it), told to host the rendezvous at an
    # address of another machine: torch's store retries, logging each try with a C++ stack
    env = _env(MASTER_ADDR="192.0.2.1", MASTER_PORT=str(find_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               TORCHELASTIC_RUN_ID="check", GROUP_RANK="0", RANK="0", LOCAL_RANK="0")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2",
                           "--timeout", "3"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL rendezvous  rank 0 on" in done.stdout
    assert "the main address 192.0.2.1 is not an address of this host" in done.stdout
    assert "resolver check: FAIL rendezvous" in done.stderr  # rank 0 shows each step as it ends
    output = done.stdout + done.stderr
    assert "frame #" not in output and "[c10d]" not in output and "TCPStore" not in output


def test_the_line_quoted_from_a_rank_is_its_error_not_a_cpp_frame():
    # what torch prints (with its C++ log on) when a store cannot be reached, then the rank's own error
    program = ("import datetime, torch.distributed as dist\n"
               "try:\n"
               "    dist.TCPStore('nosuchhost.invalid', 1, 2, is_master=False, timeout=datetime.timedelta(seconds=1))\n"
               "except Exception as exc:\n"
               "    print(f'rank 1 gave up: {type(exc).__name__}', flush=True)\n"
               "    raise SystemExit(1)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env=_env(TORCH_CPP_LOG_LEVEL="WARNING"))  # fmt: skip
    output = done.stdout + done.stderr
    assert "frame #" in output  # the stack the rank's log can end with
    assert last_meaningful_line(output) == "rank 1 gave up: DistNetworkError"
    assert last_meaningful_line(output.replace("rank 1 gave up: DistNetworkError", "")).startswith("[c10d] ")
    assert last_meaningful_line("frame #30: _start + 0x21 (0x55f9bcc66081 in python3)\n") == ""


def test_rank_0_started_by_someone_else_names_a_main_address_that_does_not_resolve():
    env = _env(MASTER_ADDR="nosuchhost.invalid", MASTER_PORT=str(find_free_port()), WORLD_SIZE="2",
               LOCAL_WORLD_SIZE="2", TORCHELASTIC_RUN_ID="check", GROUP_RANK="0", RANK="0", LOCAL_RANK="0")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2",
                           "--timeout", "3"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert (f"FAIL rendezvous  rank 0 on {HOST}: this host cannot resolve the main address 'nosuchhost.invalid'"
            in done.stdout)  # fmt: skip


@pytest.mark.parametrize("fault", ["die", "raise"])
def test_when_rank_0_ends_in_the_rendezvous_the_others_are_stopped_as_waiting_for_it_not_hung(fault):
    # a long timeout: without rank 0 the others could only wait it out, and be called hung
    env = _env(RESOLVER_CHECK_FAULT=f"0:{fault}@rendezvous")
    code, report, err, _ = _check("--devices", "3", timeout="60", env=env)
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert failed["blame"] == [0]
    assert f"rank 0 ({HOST}) exited with code {3 if fault == 'die' else 1} during rendezvous" in failed["detail"]
    for rank in (1, 2):
        assert re.search(f"rank {rank} \\({HOST}\\) (was waiting for rank 0 in rendezvous: stopped when it ended|"
                         "was still starting: stopped when rank 0 ended, as it could only wait for rank 0)",
                         failed["detail"]), failed["detail"]  # fmt: skip
    assert "hung" not in failed["detail"]


def test_each_step_is_shown_as_it_passes_before_the_report():
    # rank 1 hangs in the speed step: the check runs on for the timeout, and the steps before it
    # are on the screen meanwhile
    env = _env(RESOLVER_CHECK_FAULT="1:hang@speed", TMPDIR=tempfile.mkdtemp(prefix="check-test-"))
    check = subprocess.Popen([sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2",
                              "--timeout", "20"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert check.stderr is not None
        shown = []
        for line in check.stderr:
            shown.append(line.rstrip())
            if line.startswith("resolver check: ok   ring"):
                assert check.poll() is None, "the step was shown only after the check ended"
                break
        out, err = check.communicate(timeout=180)
    finally:
        if check.poll() is None:
            check.kill()
            check.communicate()
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    steps = [line.split()[3] for line in shown if line.startswith("resolver check: ok ")]
    assert steps == ["rendezvous", "agreement", "barrier", "all_reduce", "broadcast", "all_gather", "ring"], shown
    assert check.returncode == 1
    assert "FAIL speed" in out  # the report still follows, on stdout


@pytest.mark.parametrize(
    ("source", "fix"),
    [
        ("--master-port", "pass --master-port a free port, or leave --master-port out"),
        ("master_port", "pass master_port= a free port, or leave it out"),
        ("/jobs/flags.toml: master_port", "set master_port in /jobs/flags.toml to a free port, or remove it"),
        ("MASTER_PORT", "set MASTER_PORT to a free port, or unset it"),
        ("a free port picked by the runtime", "run it again: the runtime picks another free port"),
    ],
)
def test_a_busy_ports_fix_is_given_where_the_port_came_from(source, fix):
    error = PortInUseError("127.0.0.1", 29500, source, "pid 7: python serve.py")
    assert str(error).startswith(f"port 29500 on 127.0.0.1 (from {source}) is already in use by another process "
                                 "(pid 7: python serve.py), so rank 0 cannot host the rendezvous there")  # fmt: skip
    assert str(error).split("\n  hint: ")[1].startswith(fix)
