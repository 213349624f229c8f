"""``resolver check`` / ``runtime.check`` with real rank processes and real faults: a healthy run
passes with figures; a busy port, ranks that differ, a rank that dies, hangs or gets a wrong
value are each named (rank, host, what) within the timeout, and nothing is left running."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from preflight_support import check_environment, check_ranks

from runtime._protocol.ports import find_free_port

pytestmark = pytest.mark.timeout(240)

REPOSITORY = Path(__file__).resolve().parents[3]
HOST = socket.gethostname()


def _env(**extra: str) -> dict[str, str]:
    return check_environment(**extra)


def _leftovers(timeout: str) -> list[str]:
    """Rank processes of a check started with ``--timeout timeout`` that are still alive."""
    return [str(pid) for pid in check_ranks(lambda words: timeout.encode() in words)]


def _check(*args: str, timeout: str, env: dict[str, str] | None = None, limit: float = 120):
    """``resolver check ... --timeout timeout --format json``: (exit code, report, stderr, seconds)."""
    # A temporary folder of its own: what another run on this machine writes to /tmp is not this check's
    temp = Path(tempfile.mkdtemp(prefix="check-test-"))
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", *args,
                               "--timeout", timeout, "--format", "json"],
                              capture_output=True, text=True, env={**(env or _env()), "TMPDIR": str(temp)},
                              timeout=limit)  # fmt: skip
        seconds = time.monotonic() - start
        left = sorted(path.name for path in temp.glob("resolver-check-*"))
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert _leftovers(timeout) == [], "rank processes left behind"
    assert left == [], f"files left behind: {left}"
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done.returncode, report, done.stderr, seconds


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


@pytest.mark.parametrize("devices", [2, 3])
def test_a_healthy_run_passes_with_figures(devices):
    # the bounds of healthy runs guard against hangs; on a loaded machine a step can take 20 s
    code, report, err, _ = _check("--devices", str(devices), timeout="60.5")
    assert code == 0, err
    checks = _by_name(report)
    assert report["ok"] and report["world_size"] == devices
    assert all(checks[name]["status"] == "ok" for name in checks), checks
    pairs = {f["pair"] for f in checks["ring"]["figures"]}
    assert pairs == {f"{r}->{(r + 1) % devices} ({HOST}->{HOST})" for r in range(devices)}
    speed = checks["speed"]["figures"]
    assert {f["op"] for f in speed} == {"all_reduce", "broadcast", "all_gather"}
    assert all(f["latency_us"] > 0 and f["busbw_gbps"] >= 0 for f in speed)


def test_the_text_report_has_one_line_per_check_and_the_python_api_returns_the_same_as_data():
    done = subprocess.run([sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2",
                           "--timeout", "20"], capture_output=True, text=True, env=_env(), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = ("rendezvous", "agreement", "barrier", "all_reduce", "broadcast", "all_gather", "ring", "speed", "engine")
    for name in names:
        assert any(line.startswith(f"ok   {name}") for line in lines), done.stdout
    assert lines[-1].startswith("9 checks, passed, 2 ranks")
    script = "import runtime; r = runtime.check(devices=2, accelerator='cpu', timeout=20); print(r.ok, r['ring'].ok)"
    api = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=120)
    assert api.stdout.split() == ["True", "True"], api.stderr


def test_a_rank_that_dies_is_named_with_the_step():
    env = _env(RESOLVER_CHECK_FAULT="1:die@all_reduce")
    code, report, err, seconds = _check("--devices", "3", timeout="5.25", env=env)
    assert code == 1, err
    failed = _by_name(report)["all_reduce"]
    assert failed["status"] == "fail" and failed["blame"] == [1] and failed["hosts"] == [HOST]
    assert f"rank 1 ({HOST}) exited with code 3 during all_reduce" in failed["detail"]
    assert _by_name(report)["barrier"]["status"] == "ok"
    assert _by_name(report)["broadcast"]["status"] == "skip"


def test_a_rank_that_hangs_is_stopped_and_named_within_the_timeout():
    env = _env(RESOLVER_CHECK_FAULT="2:hang@broadcast")
    code, report, err, seconds = _check("--devices", "3", timeout="4.75", env=env)
    assert code == 1, err
    failed = _by_name(report)["broadcast"]
    assert failed["blame"] == [2]
    assert f"rank 2 ({HOST}) hung in broadcast: stopped after the 4.75 s timeout" in failed["detail"]
    # start-up, the others' wait (one timeout) and the grace before stopping it (one timeout + 3 s)
    assert report["seconds"] < 60 and seconds < 90


def test_a_rank_that_gets_a_wrong_all_reduce_value_is_named():
    env = _env(RESOLVER_CHECK_FAULT="1:wrong@all_reduce")
    code, report, err, _ = _check("--devices", "2", timeout="5.5", env=env)
    assert code == 1, err
    failed = _by_name(report)["all_reduce"]
    assert failed["blame"] == [1]
    assert f"rank 1 ({HOST}): got 4, expected 3 (the sum of 1..2" in failed["detail"]


def test_a_wrong_value_in_the_ring_names_the_pair():
    env = _env(RESOLVER_CHECK_FAULT="2:wrong@ring")
    code, report, err, _ = _check("--devices", "3", timeout="5.75", env=env)
    assert code == 1, err
    failed = _by_name(report)["ring"]
    assert failed["blame"] == [0, 2]
    assert f"pair 2->0 ({HOST}->{HOST})" in failed["detail"]


def test_a_busy_main_port_is_named_on_rank_0():
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, report, err, _ = _check("--devices", "2", "--master-port", str(port), timeout="3.5")
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert failed["blame"] == [0]
    assert (
        f"rank 0 on {HOST} cannot listen on port {port} (from --master-port): another process uses it"
        in (failed["detail"])
    )
    assert "pass --master-port a free port" in failed["fix"]


def test_ranks_started_by_someone_else_that_differ_are_shown_as_a_table_before_any_collective():
    port = find_free_port()
    common = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                  TORCHELASTIC_RUN_ID="check", GROUP_RANK="0")  # fmt: skip
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "10"]
    other = subprocess.Popen(command, env=_env(**common, RANK="1", LOCAL_RANK="1", OMP_NUM_THREADS="3",
                                                RESOLVER_PRECISION="bf16-mixed"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first = subprocess.run(command, env=_env(**common, RANK="0", LOCAL_RANK="0", OMP_NUM_THREADS="1"),
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        out, err = other.communicate(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.communicate()
    assert first.returncode == 1 and other.returncode == 1, first.stderr + err
    text = first.stdout
    assert "FAIL agreement   the ranks differ in $OMP_NUM_THREADS, $RESOLVER_PRECISION, config.precision" in text
    rows = [" ".join(line.split()) for line in text.splitlines()]
    assert f"config.precision 32-true rank 0 ({HOST})" in rows
    assert f"bf16-mixed rank 1 ({HOST})" in rows
    assert f"$OMP_NUM_THREADS 1 rank 0 ({HOST})" in rows and f"3 rank 1 ({HOST})" in rows
    assert "ok   all_reduce" in text  # a difference in threads or precision does not stop the collectives
    assert "resolver check: rank 1: agreement: the ranks differ in" in err  # the other rank says it too
    assert out == ""  # only rank 0 prints the report


@pytest.mark.skipif(shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
                    reason="torchrun is not installed")  # fmt: skip
def test_under_torchrun_rank_0_prints_the_report():
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(find_free_port()), "-m",
                           "resolver", "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "60"],
                          capture_output=True, text=True, env=_env(), timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster=torchelastic world_size=2" in done.stdout
    assert "9 checks, passed, 2 ranks" in done.stdout


def test_under_resolver_run_each_rank_runs_the_check():
    done = subprocess.run([sys.executable, "-m", "resolver", "run", "--accelerator", "cpu", "--devices", "3", "-m",
                           "resolver", "check", "--accelerator", "cpu", "--devices", "3", "--timeout", "60"],
                          capture_output=True, text=True, env=_env(), timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 checks, passed, 3 ranks" in done.stdout


@pytest.mark.parametrize("strategy", [pytest.param("deepspeed", marks=pytest.mark.deepspeed), "fsdp"])
def test_one_step_of_a_sharding_strategy_matches_a_single_process_step(strategy):
    if strategy == "deepspeed":  # CI's DeepSpeed phase (.ci/deepspeed) runs it
        pytest.importorskip("deepspeed", reason="DeepSpeed is an optional extra: pip install -e '.[deepspeed]'")
    # a generous bound: on a loaded machine importing DeepSpeed alone took over 30 s
    code, report, err, _ = _check("--devices", "2", "--strategy", strategy, timeout="90.25", limit=240)
    assert code == 0, err
    engine = _by_name(report)["engine"]
    assert engine["status"] == "ok" and f"one {strategy} step of a tiny model" in engine["detail"]


def test_one_process_passes_with_nothing_to_exchange():
    code, report, err, _ = _check("--devices", "1", timeout="10.25")
    assert code == 0, err
    checks = _by_name(report)
    assert checks["rendezvous"]["status"] == "ok" and checks["engine"]["status"] == "skip"
    assert checks["barrier"]["detail"] == "one process: there is no collective to check"


def test_an_engine_step_that_differs_from_one_process_is_named():
    env = _env(RESOLVER_CHECK_FAULT="1:wrong@engine")
    code, report, err, _ = _check("--devices", "2", timeout="60.25", env=env)
    assert code == 1, err
    engine = _by_name(report)["engine"]
    assert engine["blame"] == [1]
    assert (
        f"rank 1 ({HOST}): one ddp step differs from a single-process step in the loss after the step"
        in (engine["detail"])
    )


@pytest.mark.parametrize("args", [["--timeout", "0"], ["--timeout", "soon"], ["--frobnicate"]])
def test_usage_errors_exit_2(args):
    done = subprocess.run([sys.executable, "-m", "resolver", "check", *args], capture_output=True, text=True,
                          env=_env(), timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--timeout" in done.stderr or "unrecognized arguments: --frobnicate" in done.stderr


def _doc_examples() -> list[tuple[str, list[str]]]:
    """The console examples of docs/usage.md's "Before a long job" section: (command, shown lines)."""
    text = (REPOSITORY / "docs" / "usage.md").read_text(encoding="utf-8")
    section = text.split("## Before a long job: resolver check", 1)[1].split("\n## ", 1)[0]
    examples: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                examples.append((line[2:], []))
            elif line.strip():
                examples[-1][1].append(line)
    return examples


def _masked(line: str) -> str:
    """A report line with what changes from run to run (numbers, this host's name) taken out."""
    return " ".join(re.sub(r"\d+(\.\d+)?", "#", line.replace(f"({HOST}", "(vm").replace(f"{HOST}->", "vm->")).split())


@pytest.mark.parametrize("command, shown", _doc_examples(), ids=[c for c, _ in _doc_examples()])
def test_the_usage_doc_shows_what_the_check_prints(command, shown, tmp_path):
    """docs/usage.md's examples here start with a variable or torchrun, which the doc's own test
    (tests/support/docs_examples.py) leaves to the section's test: this one, numbers aside."""
    if command.startswith("torchrun") and shutil.which("torchrun") is None:
        command = f"{Path(sys.executable).with_name('torchrun')}{command[len('torchrun') :]}"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=180)
    assert done.returncode == (1 if "FAIL" in "".join(shown) else 0), done.stdout + done.stderr
    printed = [_masked(line) for line in done.stdout.splitlines()]
    assert [_masked(line) for line in shown] == printed


def test_in_a_job_started_by_someone_else_rank_0_names_a_rank_that_died():
    port = find_free_port()
    common = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                  TORCHELASTIC_RUN_ID="check", GROUP_RANK="0", RESOLVER_CHECK_FAULT="1:die@all_reduce")  # fmt: skip
    command = [sys.executable, "-m", "resolver", "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "5"]
    other = subprocess.Popen(command, env=_env(**common, RANK="1", LOCAL_RANK="1"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        start = time.monotonic()
        first = subprocess.run(command, env=_env(**common, RANK="0", LOCAL_RANK="0"), capture_output=True,
                               text=True, timeout=120)  # fmt: skip
        seconds = time.monotonic() - start
        other.communicate(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.communicate()
    assert first.returncode == 1 and other.returncode == 3, first.stdout + first.stderr
    assert f"FAIL all_reduce  no word from rank 1 ({HOST}) since the rendezvous: it hung or died" in first.stdout
    assert "ok   barrier" in first.stdout
    assert seconds < 60


def test_rank_0_dying_before_the_rendezvous_is_blamed_not_the_rank_that_waited_for_it():
    env = _env(RESOLVER_CHECK_FAULT="0:die@rendezvous")
    code, report, err, _ = _check("--devices", "2", timeout="3.25", env=env)
    assert code == 1, err
    failed = _by_name(report)["rendezvous"]
    assert failed["blame"] == [0]
    assert f"rank 0 ({HOST}) exited with code 3 during rendezvous" in failed["detail"]


def test_a_node_that_sees_fewer_gpus_is_the_one_blamed_and_per_task_gpu_ids_are_not_a_difference():
    from runtime.preflight.agreement import compare

    def facts(visible: str) -> dict[str, str]:
        return {"torch": "2.13.0", "$CUDA_VISIBLE_DEVICES (devices listed)": str(len(visible.split(",")))}

    # SLURM --gpus-per-task=1: every task sees one GPU with its own id; that is the same setup
    bound = {r: {"host": f"node-{r // 2}", "facts": facts(str(r % 2))} for r in range(4)}
    assert compare(bound, 0).status == "ok"
    # node 1 was started with CUDA_VISIBLE_DEVICES=0 where the others see four
    uneven = {r: {"host": f"node-{r // 2}", "facts": facts("0" if r >= 2 else "0,1,2,3")} for r in range(4)}
    check = compare(uneven, 0)
    assert check.status == "fail" and check.blame == (2, 3) and check.hosts == ("node-1", "node-1")
    assert check.table[1:] == (
        ("$CUDA_VISIBLE_DEVICES (devices listed)", "4", "rank 0,1 (node-0)"),
        ("", "1", "rank 2,3 (node-1)"),
    )


def test_a_rank_that_raises_is_named_with_its_last_line():
    env = _env(RESOLVER_CHECK_FAULT="1:raise@broadcast")
    code, report, err, _ = _check("--devices", "2", timeout="5.1", env=env)
    assert code == 1, err
    failed = _by_name(report)["broadcast"]
    assert failed["blame"] == [1]
    assert f"rank 1 ({HOST}) exited with code 1 during broadcast" in failed["detail"]
    assert "RuntimeError: injected failure at broadcast (RESOLVER_CHECK_FAULT)" in failed["detail"]
