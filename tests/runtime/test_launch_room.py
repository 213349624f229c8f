"""What cannot start is refused before anything starts: CPU devices far beyond the cores, more rank
processes than ``RLIMIT_NPROC`` leaves, a script no rank could read. When the OS refuses a rank
midway anyway, the launch says so plainly (not a raw ``BlockingIOError``) and leaves no process.

The limits are real: the launches that hit ``RLIMIT_NPROC`` run as the user ``nobody`` (root is
exempt from it), the unreadable script is read by a root without its file-reading capabilities."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime._supervision.capacity import RANKS_PER_CORE, _cores
from tests.support.cli_support import resolver_command, run_resolver

pytestmark = pytest.mark.timeout(300)

REPOSITORY = Path(__file__).resolve().parents[2]
NOBODY = 65534


def _target(strategy: object) -> int:
    return 7


def _children() -> list[int]:
    found: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        found += [int(pid) for pid in (task / "children").read_text().split()]
    return found


def test_cpu_devices_far_beyond_the_cores_are_refused_before_any_rank_starts():
    import runtime

    too_many = RANKS_PER_CORE * _cores() + 1
    before = _children()
    for strategy in ("ddp_spawn", "ddp_fork"):
        with pytest.raises(runtime.RuntimeConfigError) as caught:
            runtime.launch(_target, accelerator="cpu", devices=too_many, strategy=strategy)
        message = str(caught.value)
        assert f"cannot start {too_many} rank processes on {_cores()} CPU core(s)" in message
        assert f"hint: ask for at most {RANKS_PER_CORE * _cores()} devices here" in message
    assert _children() == before  # not one rank was started


def test_resolver_run_refuses_cpu_devices_far_beyond_the_cores(tmp_path: Path):
    (tmp_path / "train.py").write_text("open('ran', 'a').close()\n")
    too_many = str(RANKS_PER_CORE * _cores() + 1)
    done = run_resolver("run", "--accelerator", "cpu", "--devices", too_many, "train.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"error: cannot start {too_many} rank processes on {_cores()} CPU core(s)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ran").exists()


def test_a_script_no_rank_can_read_is_a_usage_error(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'a').close()\n")
    script.chmod(0)
    command = [str(resolver_command()), "run", "--accelerator", "cpu", "train.py"]
    if os.getuid() == 0:  # root reads any file: take away the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no way to make a file unreadable")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all", *command]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: script 'train.py' cannot be read: Permission denied\n"), done.stderr
    assert "= help: make it readable by this user (chmod u+r train.py)" in done.stderr
    assert not (tmp_path / "ran").exists()


# --- RLIMIT_NPROC, as an unprivileged user ---------------------------------------------------------

_LAUNCH = """
import resource, sys
import runtime
from runtime._supervision.capacity import _tasks_of_this_user

def target(strategy):
    return 7

if __name__ == "__main__":
    devices, room = int(sys.argv[1]), int(sys.argv[2])
    limit = _tasks_of_this_user() + room
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, resource.getrlimit(resource.RLIMIT_NPROC)[1]))
    try:
        runtime.launch(target, accelerator="cpu", devices=devices, strategy="ddp_spawn")
    except runtime.RuntimeConfigError as exc:
        print(f"refused: {exc}", flush=True)
        sys.exit(3)
"""


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def as_nobody() -> Iterator[tuple[list[str], Path]]:
    """A command prefix that runs as ``nobody`` (able to read this Python under /root), and a folder
    that user may write."""
    if os.getuid() != 0:
        pytest.skip("switching to another user needs root")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run as nobody")
    if _processes_of(NOBODY):
        pytest.skip("the user nobody already runs processes here: its task count is not this test's")
    folder = Path(tempfile.mkdtemp(prefix="launch-room-"))
    folder.chmod(0o777)
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
              "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]  # fmt: skip
    try:
        yield prefix, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _launch_as(prefix: list[str], folder: Path, devices: int, room: int) -> subprocess.CompletedProcess[str]:
    script = folder / "launch.py"
    script.write_text(textwrap.dedent(_LAUNCH))
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "TMPDIR": str(folder), "HOME": str(folder),
           "RESOLVER_CACHE_DIR": "off", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    return subprocess.run([*prefix, sys.executable, str(script), str(devices), str(room)], capture_output=True,
                          text=True, cwd=folder, env=env, timeout=240)  # fmt: skip


def _no_process_left() -> list[int]:
    deadline = time.monotonic() + 30
    while _processes_of(NOBODY) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _processes_of(NOBODY)


def test_more_ranks_than_rlimit_nproc_leaves_are_refused_before_any_starts(as_nobody):
    prefix, folder = as_nobody
    done = _launch_as(prefix, folder, devices=8, room=3)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused: cannot start 8 rank processes: this user may run" in done.stdout
    assert "(RLIMIT_NPROC, ulimit -u)" in done.stdout and "more can start" in done.stdout
    assert "BlockingIOError" not in done.stdout + done.stderr
    assert _no_process_left() == []


def test_the_os_refusing_a_rank_midway_is_a_clear_error_and_stops_the_started_ones(as_nobody):
    # Room for exactly the 4 ranks when the launch checks (resolving started a thread meanwhile): the
    # launch's own helper thread, started after the check, takes one, so the OS refuses the fourth rank.
    prefix, folder = as_nobody
    done = _launch_as(prefix, folder, devices=4, room=5)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused: the OS refused to start rank " in done.stdout
    assert "(Resource temporarily unavailable) after " in done.stdout
    assert "rank processes had started (they were stopped): this machine ran out of the number of processes" in (
        done.stdout
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert _no_process_left() == []
