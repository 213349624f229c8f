"""Interrupting the rank that runs in the launching process (the ``ddp`` launcher's rank 0) at the deadline.

The end-to-end cells are in ``test_runtime_faults.py`` (``hang@0``); these tests pin down the
SIGALRM handling itself, with real signals in this process. pytest-timeout's default method uses
SIGALRM too, so these tests run under its thread method: SIGALRM is free, as in a plain script.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import FrameType

import pytest

from runtime._supervision.in_process_rank import InProcessRank
from runtime.errors import LaunchTimeoutError

pytestmark = [
    pytest.mark.timeout(90, method="thread"),
    pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="no SIGALRM on this platform"),
]

REPOSITORY = Path(__file__).resolve().parents[3]


def later(seconds: float, action: object) -> threading.Timer:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.start()
    return timer


def stuck_in_a_loop(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.parametrize("stuck", [time.sleep, stuck_in_a_loop])
def test_an_interrupt_from_another_thread_ends_the_main_threads_work_with_the_timeout_error(stuck: object) -> None:
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    rank = InProcessRank(0, 10)
    stacks: list[str] = []

    def deadline() -> None:
        stacks.append(rank.stack())
        rank.interrupt()

    with pytest.raises(LaunchTimeoutError) as caught, rank.working():
        later(0.2, deadline)
        stuck(30)  # type: ignore[operator]  # only the interrupt ends it within the test

    assert (caught.value.ranks, caught.value.timeout) == ((0,), 10)
    assert "rank 0 did not finish within the 10 s launch timeout" in str(caught.value)
    assert "in test_an_interrupt_from_another_thread_ends_the_main_threads_work" in stacks[0]  # where it was
    assert "stuck(30)" in stacks[0]
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # restored
    assert rank.stack() == "" and not rank.interrupt()  # outside the work: nothing to interrupt


def test_a_programs_own_sigalrm_handler_is_left_alone_and_keeps_getting_its_alarms() -> None:
    alarms: list[int] = []

    def own(signum: int, frame: FrameType | None) -> None:
        alarms.append(signum)

    previous = signal.signal(signal.SIGALRM, own)
    try:
        rank = InProcessRank(0, 10)
        with rank.working():
            assert signal.getsignal(signal.SIGALRM) is own
            assert not rank.interrupt()  # the safe route: never a SIGALRM the program did not ask for
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            deadline = time.monotonic() + 30
            while not alarms and time.monotonic() < deadline:
                time.sleep(0.01)
        assert alarms == [signal.SIGALRM]
        assert signal.getsignal(signal.SIGALRM) is own
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_pending_alarm_of_the_program_keeps_sigalrm_its_own() -> None:
    signal.setitimer(signal.ITIMER_REAL, 600)
    try:
        rank = InProcessRank(0, 10)
        with rank.working():
            assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
            assert not rank.interrupt()
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # still pending, untouched
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_a_handler_the_work_installs_itself_stays_and_is_never_sent_the_launchers_interrupt() -> None:
    def own(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("the launcher's interrupt reached the program's handler")

    rank = InProcessRank(0, 10)
    try:
        with rank.working():
            assert signal.getsignal(signal.SIGALRM) != signal.SIG_DFL  # the launcher's
            signal.signal(signal.SIGALRM, own)
            assert not rank.interrupt()
        assert signal.getsignal(signal.SIGALRM) is own
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_outside_the_main_thread_nothing_is_installed_but_the_stack_is_still_known() -> None:
    seen: dict[str, object] = {}
    rank = InProcessRank(0, 10)

    def work() -> None:
        with rank.working():
            seen["interrupted"] = rank.interrupt()
            seen["stack"] = rank.stack()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert seen["interrupted"] is False
    assert "in work" in str(seen["stack"])
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def test_an_alarm_the_work_starts_without_a_handler_ends_the_process_as_it_would_without_the_launch() -> None:
    script = textwrap.dedent(
        """
        import signal, time
        from runtime._supervision.in_process_rank import InProcessRank

        with InProcessRank(0, 10).working():
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            time.sleep(30)
        print("the alarm was swallowed")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=REPOSITORY)  # fmt: skip
    assert done.returncode == -signal.SIGALRM, done.stdout + done.stderr
