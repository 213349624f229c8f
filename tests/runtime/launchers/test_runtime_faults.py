"""Faults in one rank, under every launcher: the right rank is blamed, nothing hangs, nothing is left.

Each test runs a user script (``scripts/fault_script.py``) in a fresh interpreter, as a user
would, with ``TMPDIR`` pointing at an empty folder so that a report folder left behind shows.
Under ``ddp`` (the subprocess launcher) the script itself is rank 0; under ``ddp_spawn`` and
``ddp_fork`` it supervises; under ``run`` it is started per rank by ``runtime.run_script`` (what
``resolver run`` does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_workers import process_is_gone, recorded_pids

from runtime.collectives.rendezvous import Rendezvous

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
FAULT_SCRIPT = SCRIPTS / "fault_script.py"
LAUNCHERS = ("ddp", "ddp_spawn", "ddp_fork", "run")

pytestmark = pytest.mark.timeout(150)


def clean_environment(tmp: Path, **extra: str) -> dict[str, str]:
    drop = {
        "RESOLVER_CONFIG",
        "RUNTIME_REPORT_DIR",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "RUNTIME_RENDEZVOUS_TIMEOUT",
    }
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp), **extra}


def command(launcher: str, kind: str, out: Path, timeout: float = 60) -> list[str]:
    if launcher == "run":
        return [sys.executable, str(SCRIPTS / "run_script_driver.py"), str(FAULT_SCRIPT), "run", kind, str(out)]
    return [sys.executable, str(FAULT_SCRIPT), launcher, kind, str(out), str(timeout)]


class Run:
    def __init__(self, launcher: str, kind: str, tmp_path: Path, timeout: float = 60, **env: str) -> None:
        self.out = tmp_path / "out"
        self.tmp = tmp_path / "tmp"
        self.out.mkdir()
        self.tmp.mkdir()
        start = time.monotonic()
        self.done = subprocess.run(
            command(launcher, kind, self.out, timeout),
            capture_output=True,
            text=True,
            timeout=140,
            env=clean_environment(self.tmp, **env),
        )
        self.seconds = time.monotonic() - start
        self.launcher = launcher

    @property
    def outcome(self) -> dict[str, object]:
        lines = [line for line in self.done.stdout.splitlines() if line.startswith("OUTCOME ")]
        assert len(lines) == 1, self.done.stdout + self.done.stderr
        return json.loads(lines[0][len("OUTCOME ") :])  # type: ignore[no-any-return]

    @property
    def message(self) -> str:
        return self.done.stderr if self.launcher == "run" else str(self.outcome["message"])

    def assert_nothing_left(self) -> None:
        assert all(process_is_gone(pid) for pid in recorded_pids(self.out))
        assert list(self.tmp.iterdir()) == []  # the report folder is gone


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_that_raises_is_blamed_with_its_own_exit_code_and_its_traceback_once(
    launcher: str, tmp_path: Path
) -> None:
    run = Run(launcher, "raise", tmp_path)

    if launcher == "run":
        assert run.done.returncode == 1
    else:
        assert (run.outcome["error"], run.outcome["rank"], run.outcome["exit_code"]) == ("RankFailedError", 1, 1)
    assert "rank 1 failed (exit code 1): ValueError: rank 1 cannot go on: bad batch 42" in run.message
    everything = run.done.stdout + run.done.stderr
    assert everything.count('raise ValueError("rank 1 cannot go on: bad batch 42")') == 1
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_error_that_carries_its_fix_reads_as_the_command_line_renders_it(launcher: str, tmp_path: Path) -> None:
    run = Run(launcher, "raise-hinted", tmp_path)

    lines = run.message.splitlines()
    head = next(index for index, line in enumerate(lines) if "rank 1 failed" in line)
    # the error, its fix last as "= help:" (not "hint:", not behind a rank's prefix), then the rank's traceback
    assert lines[head].endswith("rank 1 failed (exit code 1): error: rank 1 cannot go on: bad batch 42"), run.message
    assert lines[head + 1 : head + 3] == ["  = help: drop batch 42 from the data", ""], run.message
    assert "--- traceback of rank 1 ---" in lines[head + 3], run.message
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(("kind", "code", "shell_code"), [("exit3", 3, 3), ("sigkill", -9, 137)])
def test_a_rank_that_dies_without_reporting_is_blamed_not_the_peer_it_left_behind(
    launcher: str, kind: str, code: int, shell_code: int, tmp_path: Path
) -> None:
    run = Run(launcher, kind, tmp_path)

    if launcher == "run":
        assert run.done.returncode == shell_code, run.done.stderr
    else:
        assert (run.outcome["rank"], run.outcome["exit_code"]) == (1, code), run.outcome
    assert f"rank 1 failed (exit code {code})" in run.message
    headline = next(line for line in run.message.splitlines() if "rank 1 failed" in line)
    assert "Connection" not in headline
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_that_skips_a_collective_and_exits_is_named_as_the_one_that_left(launcher: str, tmp_path: Path) -> None:
    run = Run(launcher, "skip", tmp_path)

    if launcher != "run":
        assert run.outcome["rank"] == 1, run.outcome
    else:
        assert run.done.returncode == 1
    assert "rank 1 failed (exit code 0): its work returned and it left the run while rank 0 still waited" in run.message
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_0_that_skips_a_collective_and_returns_is_named_as_the_one_that_left(
    launcher: str, tmp_path: Path
) -> None:
    # Under ddp rank 0 is the launching process itself: its departure is not a process exit.
    run = Run(launcher, "skip@0", tmp_path)

    if launcher == "run":
        assert run.done.returncode == 1, run.done.stderr
    else:
        assert (run.outcome["error"], run.outcome["rank"]) == ("RankFailedError", 0), run.outcome
        assert run.outcome["exit_code"] == (None if launcher == "ddp" else 0), run.outcome
    exit_code = "" if launcher == "ddp" else " (exit code 0)"
    assert f"rank 0 failed{exit_code}: its work returned and it left the run while rank 1 still waited" in run.message
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(("kind", "where"), [("device-fail", "being selected"), ("device-late-fail", "joining")])
def test_a_rank_that_fails_before_joining_fails_the_launch_within_seconds(
    launcher: str, kind: str, where: str, tmp_path: Path
) -> None:
    # Before it told the launcher it arrived, or after (while rank 0 already waits in the rendezvous).
    run = Run(launcher, kind, tmp_path, timeout=600)  # no launch timeout, 300 s rendezvous timeout

    if launcher == "run":
        assert run.done.returncode == 1, run.done.stderr
        seconds = run.seconds
    else:
        assert (run.outcome["error"], run.outcome["rank"]) == ("RankFailedError", 1), run.outcome
        seconds = float(run.outcome["seconds"])  # type: ignore[arg-type]
    assert f"rank 1 failed (exit code 1): OSError: rank 1: device went away while {where}" in run.message
    assert seconds < 120  # not torch's 30 minutes, nor the 300 s rendezvous timeout
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_that_hangs_in_the_rendezvous_is_named_with_its_stack_not_the_rank_that_waited(
    launcher: str, tmp_path: Path
) -> None:
    # Rank 1 told its launcher it arrived, then hangs while joining: the peers wait for it in the
    # rendezvous, bounded by the rendezvous timeout, not the (600 s) collective timeout.
    run = Run(launcher, "device-late-hang", tmp_path, timeout=600, RUNTIME_RENDEZVOUS_TIMEOUT="20")

    if launcher == "run":
        assert run.done.returncode == 124, run.done.stderr
        assert run.seconds < 120
    else:
        assert (run.outcome["error"], run.outcome["ranks"]) == ("RendezvousTimeoutError", [1]), run.outcome
        assert float(run.outcome["seconds"]) < 120  # type: ignore[arg-type]
    assert "rank 1 did not reach the rendezvous within the 20 s rendezvous timeout" in run.message
    assert "rank 0 was waiting for it in the rendezvous (joining the process group)" in run.message
    assert "in set_device" in run.message.split("--- where rank 1 was ---")[1]  # where it hung
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", ("ddp", "ddp_spawn", "ddp_fork"))
def test_a_rank_that_hangs_before_the_rendezvous_is_named_with_its_stack(launcher: str, tmp_path: Path) -> None:
    run = Run(launcher, "device-hang", tmp_path, timeout=600, RUNTIME_RENDEZVOUS_TIMEOUT="20")

    assert (run.outcome["error"], run.outcome["ranks"]) == ("RendezvousTimeoutError", [1]), run.outcome
    assert "rank 1 did not reach the rendezvous within the 20 s rendezvous timeout" in run.message
    assert "in set_device" in run.message  # where it hung
    run.assert_nothing_left()


@pytest.mark.parametrize("launcher", ("ddp", "ddp_spawn", "ddp_fork"))
def test_a_rank_that_hangs_in_its_work_is_reported_with_its_stack_not_as_the_peers_collective_timeout(
    launcher: str, tmp_path: Path
) -> None:
    run = Run(launcher, "hang", tmp_path, timeout=25)

    # Rank 0 waits in a barrier whose collective timeout is the same 25 s: that echo is not the error.
    assert (run.outcome["error"], run.outcome["ranks"]) == ("LaunchTimeoutError", [1]), run.outcome
    assert "rank 0 was waiting for it in barrier() (called at fault_workers.py:" in run.message
    assert "--- where rank 1 was ---" in run.message
    assert "in fault" in run.message.split("--- where rank 1 was ---")[1]  # its stack: the sleep in fault()
    run.assert_nothing_left()


# Rank 1 freezes itself with SIGSTOP in a DDP training step; rank 0 waits for its gradients inside
# torch's backward pass (its stack is not in a runtime collective). A stopped process cannot dump
# its stack: the one rank that does not answer is named, with its pid and state, not "ranks 0, 1".
@pytest.mark.parametrize("launcher", ("ddp", "ddp_spawn", "ddp_fork"))
def test_a_rank_frozen_by_sigstop_is_named_as_the_one_that_did_not_answer_the_stack_request(
    launcher: str, tmp_path: Path
) -> None:
    run = Run(launcher, "train-sigstop", tmp_path, timeout=45, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))

    assert (run.outcome["error"], run.outcome["ranks"]) == ("LaunchTimeoutError", [1]), run.message
    assert run.message.startswith("rank 1 did not finish within the 45 s launch timeout"), run.message
    pid = (run.out / "pid-1").read_text().split(":")[0]
    assert f"rank 1 (pid {pid}) did not answer the request for its Python stack: a signal had frozen it" in run.message
    assert f"(state T in /proc/{pid}/stat: SIGSTOP" in run.message
    assert "rank 0 answered the request for its stack (below): it was running, not frozen" in run.message
    assert "in train_until_rank_1_stops" in run.message.split("--- where rank 0 was ---")[1]
    run.assert_nothing_left()  # the stopped rank too


# Under ddp rank 0 runs in the launching process: stopping rank 1 does not end its sleep; the
# launcher interrupts it (runtime._supervision.in_process_rank). Were it not interrupted, the
# 600 s sleep would outlast the 140 s the test waits for the script.
@pytest.mark.parametrize("launcher", ("ddp", "ddp_spawn", "ddp_fork"))
def test_a_rank_0_that_hangs_in_plain_python_is_stopped_at_the_timeout_and_named_with_its_stack(
    launcher: str, tmp_path: Path
) -> None:
    run = Run(launcher, "hang@0", tmp_path, timeout=25)

    assert (run.outcome["error"], run.outcome["ranks"]) == ("LaunchTimeoutError", [0]), run.outcome
    assert "rank 0 did not finish within the 25 s launch timeout" in run.message
    assert "rank 1 was waiting for it in all_reduce() (called at fault_workers.py:" in run.message
    assert "in fault" in run.message.split("--- where rank 0 was ---")[1]  # its stack: the sleep in fault()
    run.assert_nothing_left()


def test_a_program_that_uses_sigalrm_itself_keeps_it_and_a_hung_rank_0_is_still_named(tmp_path: Path) -> None:
    # The script's own SIGALRM handler and alarm (35 s) are set before launch(timeout=25): the
    # launcher leaves SIGALRM alone, so rank 0 is not interrupted at the deadline (rank 1 is
    # stopped); the program's own alarm ends the sleep, and the timeout is what is reported.
    run = Run("ddp", "hang@0", tmp_path, timeout=25, FAULT_SCRIPT_ALARM="35")

    assert (run.outcome["error"], run.outcome["ranks"]) == ("LaunchTimeoutError", [0]), run.outcome
    assert (run.outcome["alarm_fired"], run.outcome["alarm_handler_kept"]) == (True, True), run.outcome
    assert "rank 0 did not finish within the 25 s launch timeout" in run.message
    assert "rank 1 was waiting for it in all_reduce()" in run.message
    run.assert_nothing_left()


# Under ddp the launching process is rank 0, blocked in a barrier its peer never reaches: the
# SIGTERM is acted on at once all the same (runtime._supervision.signals), not at the 120 s timeout.
@pytest.mark.parametrize("launcher", ("ddp", "ddp_spawn", "ddp_fork"))
def test_sigterm_to_the_launching_process_stops_the_ranks_and_removes_the_report_folder_at_once(
    launcher: str, tmp_path: Path
) -> None:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    launching = subprocess.Popen(
        command(launcher, "hang", out, 120),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environment(tmp),
    )
    try:
        deadline = time.monotonic() + 90
        while len(recorded_pids(out)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(recorded_pids(out)) == 2
        time.sleep(1)  # rank 0 is in the barrier by now
        launching.send_signal(signal.SIGTERM)
        start = time.monotonic()
        _, stderr = launching.communicate(timeout=60)
        seconds = time.monotonic() - start
    finally:
        launching.kill()
        launching.wait()
    assert launching.returncode == 143, stderr  # 128 + SIGTERM, as a shell reports it
    assert seconds < 30, seconds  # not when the barrier's 120 s timeout ends it
    assert all(process_is_gone(pid) for pid in recorded_pids(out))
    assert list(tmp.iterdir()) == []


def test_a_report_folder_left_by_a_killed_launch_is_removed_by_the_next_launch(tmp_path: Path) -> None:
    from runtime._supervision.cleanup import report_folder

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"runtime-ranks-{dead.pid}-1-abc"
    stale.mkdir()
    (stale / "rank-1.error.json").write_text("{}")
    start_time = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    alive = tmp_path / f"runtime-ranks-{os.getpid()}-{start_time}-xyz"
    alive.mkdir()

    os.environ["TMPDIR"], saved = str(tmp_path), os.environ.get("TMPDIR")
    import tempfile

    tempfile.tempdir = None
    try:
        with report_folder() as folder:
            assert Path(folder).parent == tmp_path
            assert not stale.exists() and alive.exists()  # only the dead launcher's folder goes
        assert not Path(folder).exists()
    finally:
        if saved is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = saved
        tempfile.tempdir = None


def test_the_rendezvous_wait_is_bounded_by_the_rendezvous_timeout_not_the_collective_timeout() -> None:
    from runtime._protocol.ports import find_free_port
    from runtime._protocol.rank_files import is_communication_error
    from runtime.collectives.torch_distributed import TorchCollective
    from runtime.errors import RendezvousWaitError

    collective = TorchCollective()
    start = time.monotonic()
    with pytest.raises(RendezvousWaitError) as caught:  # rank 1 never comes
        collective.setup(
            Rendezvous(
                rank=0,
                world_size=2,
                backend="gloo",
                master_addr="127.0.0.1",
                master_port=find_free_port(),
                timeout=600,
                rendezvous_timeout=2,
            )
        )
    assert time.monotonic() - start < 60  # not the 600 s collective timeout
    assert (caught.value.rank, caught.value.missing, caught.value.timeout) == (0, (1,), 2)
    assert "rank 0 waited 2 s (the rendezvous timeout) in the rendezvous at tcp://127.0.0.1:" in str(caught.value)
    assert is_communication_error(caught.value)  # an echo: the launcher blames the missing rank
    assert not collective.is_initialized


def test_the_rendezvous_timeout_is_a_strategy_option_before_the_environment_variable() -> None:
    import resolver
    import runtime
    from runtime._protocol.rank_environment import rendezvous_timeout
    from runtime.errors import RuntimeConfigError

    config = resolver.resolve(devices=2, strategy="ddp_spawn", accelerator="cpu")
    strategy = runtime.build(config, rendezvous_timeout=45)
    assert strategy.options.rendezvous_timeout == 45
    assert rendezvous_timeout(strategy.config, {"RUNTIME_RENDEZVOUS_TIMEOUT": "9"}) == 45
    assert rendezvous_timeout(config, {"RUNTIME_RENDEZVOUS_TIMEOUT": "9"}) == 9
    assert rendezvous_timeout(config, {}) == 300
    with pytest.raises(RuntimeConfigError, match="rendezvous_timeout"):
        runtime.build(config, rendezvous_timeout=0)
