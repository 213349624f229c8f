"""``resolver check`` stopped from outside (SIGTERM from a job scheduler or ``kill``, SIGINT from
Ctrl-C) while its ranks run with a long timeout: it exits at once, no ``runtime.preflight.rank``
process stays behind and its ``resolver-check-*`` folder is removed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from preflight_support import check_environment, check_ranks

from tests.support.cli_support import resolver_command

pytestmark = pytest.mark.timeout(240)


def _env(temp: Path) -> dict[str, str]:
    env = check_environment()
    # Rank 1 hangs in the agreement step: without the signal, the check would wait a day.
    env["RESOLVER_CHECK_FAULT"] = "1:hang@agreement"
    env["TMPDIR"] = str(temp)  # this check's folder, and its ranks' command lines, name this folder alone
    return env


def _ranks_of(temp: Path) -> list[int]:
    """The rank processes whose command line names a file in ``temp`` (this test's check only)."""
    return check_ranks(lambda words: any(str(temp).encode() in word for word in words))


def _wait_for(condition, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_check_leaves_no_rank_and_no_folder(tmp_path, signum, code):
    temp = tmp_path / "tmp"
    temp.mkdir()
    check = subprocess.Popen(
        [str(resolver_command()), "check", "--accelerator", "cpu", "--devices", "2", "--timeout", "86400"],
        env=_env(temp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Both ranks started (the folder holds their logs), and the hanging one is in its step.
        assert _wait_for(lambda: len(_ranks_of(temp)) == 2, 120), "the ranks never started"
        assert [p.name for p in temp.iterdir() if p.name.startswith("resolver-check-")]
        time.sleep(2)
        check.send_signal(signum)
        out, err = check.communicate(timeout=60)
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
    left = _ranks_of(temp)
    for pid in left:  # fail the test, not the machine: stop what it found
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"rank processes left running: {left}"
    assert check.returncode == code, err
    assert "Traceback" not in err
    assert list(temp.iterdir()) == [], "the check's folder was left behind"
