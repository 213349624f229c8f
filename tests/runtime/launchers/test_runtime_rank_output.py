"""The rank output pump: real processes write to real pipes; the console gets whole prefixed lines.

The pump writes to this process's file descriptors 1 and 2, which ``capfdbinary`` reads back.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runtime.errors import RuntimeConfigError
from runtime.launchers.rank_output import MAX_LINE, RankOutput, RankOutputPump
from tests.support.docs_examples import named_file_block

pytestmark = pytest.mark.timeout(120)


def start(pump: RankOutputPump, code: str, rank: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RANK": str(rank)}
    return pump.popen([sys.executable, "-c", code], env=env, rank=rank, local_rank=rank)


def no_pump_thread() -> bool:
    return all(thread.name != "rank-output" for thread in threading.enumerate())


# Each rank writes its lines in three pieces, flushing after each: the pieces of two ranks would
# mix on a line if the pump passed reads through as they come.
PIECES = """
import os, sys
rank = os.environ["RANK"]
for i in range(LINES):
    for piece in ("rank", f" {rank} line", f" {i} " + "x" * (i % 50) + "\\n"):
        sys.stdout.write(piece)
        sys.stdout.flush()
    if i % 100 == 0:
        sys.stderr.write(f"rank {rank} progress {i}\\n")
        sys.stderr.flush()
"""


def test_two_ranks_writing_lines_in_pieces_never_share_a_line(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    lines = 1500
    with RankOutputPump(RankOutput(), 2) as pump:
        processes = [start(pump, PIECES.replace("LINES", str(lines)), rank) for rank in (0, 1)]
        for process in processes:
            assert process.wait(60) == 0
    out, err = capfdbinary.readouterr()

    assert no_pump_thread()
    shown = out.decode().splitlines()
    assert len(shown) == 2 * lines
    for rank in (0, 1):
        mine = [line for line in shown if line.startswith(f"[rank {rank}]: ")]
        expected = [f"[rank {rank}]: rank {rank} line {i} " + "x" * (i % 50) for i in range(lines)]
        assert mine == expected  # whole, in order, nothing lost
    progress = err.decode().splitlines()
    assert len(progress) == 2 * 15 and all(re.fullmatch(r"\[rank (\d)\]: rank \1 progress \d+", p) for p in progress)


def test_a_rank_writing_far_more_than_a_pipe_holds_is_drained_and_nothing_is_lost(
    capfdbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    # 8 MB on each stream (a pipe holds 64 KiB): the rank only exits if the pump keeps reading.
    code = (
        "import sys\n"
        "chunk = b'y' * 1023 + b'\\n'\n"
        "for _ in range(8192):\n"
        "    sys.stdout.buffer.write(chunk); sys.stderr.buffer.write(chunk)\n"
        f"sys.stdout.buffer.write(b'z' * {MAX_LINE + 10})\n"  # a last line longer than MAX_LINE, no newline
    )
    with RankOutputPump(RankOutput(log_dir=str(tmp_path)), 1) as pump:
        process = start(pump, code, 0)
        assert process.wait(60) == 0
    out, err = capfdbinary.readouterr()

    assert err == (b"[rank 0]: " + b"y" * 1023 + b"\n") * 8192
    # the long last line is cut at MAX_LINE; each piece is a prefixed console line of its own
    assert out.endswith(b"[rank 0]: " + b"z" * MAX_LINE + b"\n[rank 0]: " + b"z" * 10 + b"\n")
    log = (tmp_path / "rank_0.log").read_bytes()
    assert len(log) == 2 * 8192 * 1024 + MAX_LINE + 10  # the log is the rank's bytes, exactly
    assert log.endswith(b"\n" + b"z" * (MAX_LINE + 10))


def test_output_that_is_not_utf8_passes_through_and_a_last_line_without_newline_is_kept(
    capfdbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    code = "import sys; sys.stdout.buffer.write(b'\\xff\\xfe\\x00 raw\\nlast line, no newline')"
    with RankOutputPump(RankOutput(log_dir=str(tmp_path)), 1) as pump:
        assert start(pump, code, 0).wait(60) == 0
    out, _ = capfdbinary.readouterr()

    assert out == b"[rank 0]: \xff\xfe\x00 raw\n[rank 0]: last line, no newline\n"
    assert (tmp_path / "rank_0.log").read_bytes() == b"\xff\xfe\x00 raw\nlast line, no newline"


def test_the_filter_limits_the_console_and_tee_picks_the_logged_streams(
    capfdbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    code = "import os, sys; r = os.environ['RANK']; print('out', r); print('err', r, file=sys.stderr)"
    output = RankOutput(log_dir=str(tmp_path / "logs"), tee=1, local_ranks_filter=(1,))
    with RankOutputPump(output, 2) as pump:
        for rank in (0, 1):
            assert start(pump, code, rank).wait(60) == 0
    out, err = capfdbinary.readouterr()

    assert (out, err) == (b"[rank 1]: out 1\n", b"[rank 1]: err 1\n")
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["rank_0.log", "rank_1.log"]
    assert (tmp_path / "logs" / "rank_0.log").read_text() == "out 0\n"  # tee=1: stdout only


def test_without_prefix_lines_are_still_whole(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    with RankOutputPump(RankOutput(prefix=False), 1) as pump:
        assert start(pump, "print('plain')", 0).wait(60) == 0
    assert capfdbinary.readouterr().out == b"plain\n"


def test_without_an_output_the_ranks_write_to_this_process_streams_directly(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    with RankOutputPump(None, 1) as pump:
        process = start(pump, "print('straight')", 0)
        assert process.stdout is None and process.wait(60) == 0
    assert capfdbinary.readouterr().out == b"straight\n"
    assert no_pump_thread()


def test_a_process_left_behind_holding_the_pipe_does_not_keep_the_launcher_waiting(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    # The rank starts a child that inherits its stdout and outlives it.
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('left', child.pid, flush=True)\n"
    )
    with RankOutputPump(RankOutput(), 1) as pump:
        assert start(pump, code, 0).wait(60) == 0
        started = time.monotonic()
        pump.close(drain=0.5)
        seconds = time.monotonic() - started
    out = capfdbinary.readouterr().out.decode()
    os.kill(int(out.split()[-1]), signal.SIGKILL)  # the test's own leftover

    assert out.startswith("[rank 0]: left ")
    assert seconds < 30 and no_pump_thread()


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (RankOutput(local_ranks_filter=(0, 2)), "names local rank(s) 2, but this node runs local ranks 0-1"),
        (RankOutput(local_ranks_filter=()), "is empty"),
    ],
)
def test_a_filter_naming_a_rank_outside_the_run_is_refused(output: RankOutput, message: str) -> None:
    with pytest.raises(RuntimeConfigError, match=re.escape(message)):
        RankOutputPump(output, 2)


def test_a_log_folder_that_cannot_be_made_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    message = r"cannot write the rank logs \(--log-dir\) to .*a-file/logs: Not a directory"
    with pytest.raises(RuntimeConfigError, match=message):
        RankOutputPump(RankOutput(log_dir=str(tmp_path / "a-file" / "logs")), 1)


def test_tee_takes_torchruns_values_only() -> None:
    with pytest.raises(ValueError, match="tee must be 0"):
        RankOutput(tee=4)


def docs_example(name: str) -> str:
    return named_file_block("docs/runtime.md", name)


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork"])
def test_the_runtime_launch_example_prefixes_and_logs_the_ranks_it_starts(strategy: str, tmp_path: Path) -> None:
    code = docs_example("rank_output_example.py")  # as written: ddp
    (tmp_path / "rank_output_example.py").write_text(code.replace('strategy="ddp"', f"strategy={strategy!r}"))

    done = subprocess.run(
        [sys.executable, "rank_output_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        env=os.environ,
    )

    both = done.stdout + done.stderr
    assert done.returncode == 0, both
    assert "hello from rank 1\n" in done.stderr.splitlines(keepends=True), both  # the example prints rank 1's log
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    if strategy == "ddp":  # rank 0 is the calling process: its output is its own
        # Rank 1's line is written whole; under PYTHONUNBUFFERED it may land between rank 0's text
        # and its newline (docs/runtime.md), so it is taken out wherever it is.
        assert done.stdout.count("[rank 1]: hello from rank 1\n") == 1, both
        assert done.stdout.replace("[rank 1]: hello from rank 1\n", "") == "hello from rank 0\n", both
        assert logs == ["rank_1.log"]
    else:  # every rank is a child
        assert sorted(done.stdout.splitlines()) == ["[rank 0]: hello from rank 0", "[rank 1]: hello from rank 1"], both
        assert logs == ["rank_0.log", "rank_1.log"]


def test_ranks_started_by_runtime_launch_keep_their_streams_by_default(tmp_path: Path) -> None:
    code = (
        docs_example("rank_output_example.py")
        .replace(', strategy_options={"rank_output": {"log_dir": "logs"}}', "")
        .replace('print(open("logs/rank_1.log").read(), end="", file=sys.stderr)', "pass")
    )
    (tmp_path / "plain.py").write_text(code)

    done = subprocess.run(
        [sys.executable, "plain.py"], cwd=tmp_path, capture_output=True, text=True, timeout=100, env=os.environ
    )

    assert done.returncode == 0, done.stderr
    # Straight through, unprefixed: two ranks' lines may even interleave (PYTHONUNBUFFERED writes a
    # line's text and its newline separately), which is what the option is for.
    assert sorted(re.findall(r"hello from rank \d", done.stdout)) == ["hello from rank 0", "hello from rank 1"]
    assert "[rank" not in done.stdout
    assert not (tmp_path / "logs").exists()


FAULT_WITH_RANK_OUTPUT = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
import fault_workers
import runtime

if __name__ == "__main__":
    try:
        runtime.launch(fault_workers.fault, {kind!r}, {out!r}, devices=2, strategy={strategy!r}, timeout=60,
                       strategy_options={{"rank_output": True}})
    except runtime.RankFailedError as error:
        print("RAISED", error.rank, error.exit_code, flush=True)
        print(error, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("strategy", "kind", "exit_code"),
    [("ddp", "raise", 1), ("ddp", "sigkill", -9), ("ddp_spawn", "raise", 1), ("ddp_fork", "sigkill", -9)],
)
def test_a_failing_rank_is_still_blamed_once_with_rank_output_on(
    strategy: str, kind: str, exit_code: int, tmp_path: Path
) -> None:
    from runtime_workers import process_is_gone, recorded_pids

    tests = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "fault.py"
    script.write_text(
        FAULT_WITH_RANK_OUTPUT.format(
            tests=str(tests), root=str(tests.parents[1]), kind=kind, out=str(out), strategy=strategy
        )
    )

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=os.environ)

    assert f"RAISED 1 {exit_code}" in done.stdout.splitlines(), done.stdout + done.stderr
    assert done.stderr.count('raise ValueError("rank 1 cannot go on: bad batch 42")') == (kind == "raise")
    pids = recorded_pids(out)
    assert len(pids) == 2 and all(process_is_gone(pid) for pid in pids)
