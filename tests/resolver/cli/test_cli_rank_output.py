"""`resolver run` shows each rank's output as whole prefixed lines and logs it per rank (the real command)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import ROOT, resolver_command

pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(200)

SCRIPTS = ROOT / "tests" / "runtime" / "scripts"
RANK_VARIABLES = {
    "RESOLVER_CONFIG",
    "RUNTIME_REPORT_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
}


def resolver_run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    """``resolver run ARGS`` as a user types it; output as bytes (ranks may write any)."""
    environ = {**{k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}, **env}
    return subprocess.run(
        [str(resolver_command()), "run", *args], cwd=cwd, env=environ, capture_output=True, timeout=180
    )


# Each rank writes its lines in pieces, flushing after each, plus bytes that are not UTF-8 and a
# last line without a newline.
CHATTY = """
import os, sys
rank = os.environ["RANK"]
for i in range(300):
    for piece in ("rank", f" {rank} line", f" {i}\\n"):
        sys.stdout.write(piece)
        sys.stdout.flush()
print(f"rank {rank} warns", file=sys.stderr)
sys.stdout.flush()
sys.stdout.buffer.write(b"\\xff\\xfe not utf-8\\n")
sys.stdout.buffer.write(f"rank {rank} ends without a newline".encode())
"""


def test_every_line_is_whole_and_prefixed_with_its_rank_and_stderr_stays_stderr(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(CHATTY)

    done = resolver_run("--devices", "2", "--strategy", "ddp", "chatty.py", cwd=tmp_path)

    assert done.returncode == 0, done.stderr.decode(errors="replace")
    lines = done.stdout.split(b"\n")
    assert lines[-1] == b""  # the last line too ends with a newline
    for rank in (0, 1):
        prefix = f"[rank {rank}]: ".encode()
        mine = [line for line in lines if line.startswith(prefix)]
        assert mine == [prefix + f"rank {rank} line {i}".encode() for i in range(300)] + [
            prefix + b"\xff\xfe not utf-8",
            prefix + f"rank {rank} ends without a newline".encode(),
        ]
    assert len(lines) == 2 * 302 + 1  # nothing else, nothing mixed
    warnings = [line for line in done.stderr.decode().splitlines() if "warns" in line]
    assert sorted(warnings) == ["[rank 0]: rank 0 warns", "[rank 1]: rank 1 warns"]


def test_tee_without_a_log_dir_makes_a_folder_and_says_where(tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(
        "import os, sys\nprint('out', os.environ['RANK'])\nprint('err', os.environ['RANK'], file=sys.stderr)\n"
    )
    temporary = tmp_path / "tmp"
    temporary.mkdir()

    done = resolver_run("--devices", "2", "--tee", "2", "hello.py", cwd=tmp_path, TMPDIR=str(temporary))

    assert done.returncode == 0, done.stderr.decode()
    said = re.search(r"each rank's output is logged to (\S+)/rank_<N>\.log", done.stderr.decode())
    assert said is not None, done.stderr.decode()
    folder = Path(said.group(1))
    assert folder.parent == temporary and folder.name.startswith("resolver-run-logs-")
    assert (folder / "rank_1.log").read_text() == "err 1\n"  # --tee 2: stderr only
    assert sorted(done.stdout.decode().splitlines()) == ["[rank 0]: out 0", "[rank 1]: out 1"]  # console: all


def test_no_prefix_shows_each_ranks_lines_whole_and_bare(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(CHATTY)

    done = resolver_run("--devices", "2", "--no-prefix", "chatty.py", cwd=tmp_path)

    assert done.returncode == 0, done.stderr.decode(errors="replace")
    lines = done.stdout.split(b"\n")
    assert b"[rank" not in done.stdout and b"[rank" not in done.stderr
    for rank in (0, 1):  # whole lines still: each rank's, in its order, none mixed with the other's
        mine = [line for line in lines if line.startswith(f"rank {rank} ".encode())]
        assert mine == [f"rank {rank} line {i}".encode() for i in range(300)] + [
            f"rank {rank} ends without a newline".encode()
        ]
    assert lines.count(b"\xff\xfe not utf-8") == 2 and len(lines) == 2 * 302 + 1
    assert sorted(line for line in done.stderr.decode().splitlines() if "warns" in line) == [
        "rank 0 warns",
        "rank 1 warns",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--local-ranks-filter", "2"], "names local rank(s) 2, but this node runs local ranks 0-1"),
        (["--local_ranks_filter", "0,x"], "'0,x' is not a list of local rank numbers"),
        (["--local-ranks-filter", ""], "is not a list of local rank numbers"),
        (["--tee", "4"], "'4' is not a stream selector: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"),
        (["--log-dir", "a-file/logs"], "cannot write the rank logs (--log-dir) to a-file/logs: Not a directory"),
    ],
)
def test_a_bad_output_option_is_a_usage_error_and_nothing_starts(
    options: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "job.py").write_text("open('started', 'w').close()\n")

    done = resolver_run("--devices", "2", *options, "job.py", cwd=tmp_path)

    assert done.returncode == 2
    assert message in done.stderr.decode()
    assert not (tmp_path / "started").exists()


def test_a_failing_rank_is_reported_once_after_every_ranks_output_with_its_exit_code(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(
        "import os, time\n"
        "rank = os.environ['RANK']\n"
        "print('rank', rank, 'starts', flush=True)\n"
        "if rank == '1':\n"
        "    raise ValueError('bad batch 42')\n"
        "time.sleep(60)\n"
    )

    done = resolver_run("--devices", "2", "job.py", cwd=tmp_path)

    assert done.returncode == 1
    assert sorted(done.stdout.decode().splitlines()) == ["[rank 0]: rank 0 starts", "[rank 1]: rank 1 starts"]
    report = done.stderr.decode().split("resolver run: ", 1)[1]
    assert report.startswith("rank 1 failed (exit code 1): ValueError: bad batch 42")
    assert done.stderr.decode().count("raise ValueError('bad batch 42')") == 1
    assert "[rank 1]:     raise ValueError('bad batch 42')" in report  # the traceback carries the prefix


@pytest.mark.parametrize(("kind", "code"), [("raise", 1), ("sigkill", 137)])
def test_the_fault_table_holds_with_rank_output(kind: str, code: int, tmp_path: Path) -> None:
    """Two cells of docs/runtime.md's fault table, through the real command (ranks use runtime.launch)."""
    out = tmp_path / "out"
    out.mkdir()

    done = resolver_run(
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--timeout",
        "120",
        str(SCRIPTS / "fault_script.py"),
        "run",
        kind,
        str(out),
        cwd=tmp_path,
    )

    stderr = done.stderr.decode()
    assert done.returncode == code, stderr
    assert f"rank 1 failed (exit code {code if kind == 'raise' else -9})" in stderr
    assert stderr.count('raise ValueError("rank 1 cannot go on: bad batch 42")') == (kind == "raise")
    sys.path.insert(0, str(SCRIPTS.parent))
    try:
        from runtime_workers import process_is_gone, recorded_pids
    finally:
        sys.path.remove(str(SCRIPTS.parent))
    pids = recorded_pids(out)
    assert len(pids) == 2 and all(process_is_gone(pid) for pid in pids)


def test_a_console_reader_that_goes_away_does_not_hang_the_run_or_show_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "loud.py").write_text("for i in range(200000):\n    print('line', i)\n")
    environ = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    with subprocess.Popen(
        [str(resolver_command()), "run", "--devices", "2", "loud.py"],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b"[rank ")
        process.stdout.close()  # like `resolver run ... | head -1`
        errors = process.stderr.read().decode()
        assert process.wait(120) == 0
    assert "Traceback" not in errors
