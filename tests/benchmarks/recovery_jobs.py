"""What ``recovery.py`` runs on its network-namespace hosts: launchers started on a host, their output
read as it comes (the ``STEP`` lines of ``recovery_training.py`` parsed), a host's processes killed,
and everything stopped and removed afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

import attrs

_STEP = re.compile(
    r"STEP (?P<at>\d+\.\d+) step=(?P<step>\d+) world=(?P<world>\d+) rank=(?P<rank>\d+) "
    r"restart=(?P<restart>\d+) host=(?P<host>\S+) pid=(?P<pid>\d+)"
)


@attrs.frozen
class Step:
    """One ``STEP`` line: when (the rank's ``time.time()``), which step, the world, the rank and attempt."""

    at: float
    step: int
    world: int
    rank: int
    restart: int
    host: str
    pid: int


class Output:
    """Every line the launchers print, with the ``STEP`` lines parsed, shared by their reader threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: list[Step] = []
        self._lines: dict[int, list[str]] = {}
        self._times: dict[int, list[float]] = {}

    def read(self, job: int, stream: IO[str]) -> None:
        for line in stream:
            found = _STEP.search(line)
            with self._lock:
                self._lines.setdefault(job, []).append(line.rstrip("\n"))
                self._times.setdefault(job, []).append(time.time())
                if found is not None:
                    self._steps.append(Step(float(found["at"]), *(int(found[k]) for k in ("step", "world", "rank",
                                            "restart")), found["host"], int(found["pid"])))  # fmt: skip

    def steps(self) -> list[Step]:
        with self._lock:
            return list(self._steps)

    def lines(self, job: int) -> list[str]:
        with self._lock:
            return list(self._lines.get(job, []))

    def timed_lines(self, job: int) -> list[tuple[float, str]]:
        """Each line with the time it was read (``time.time()``)."""
        with self._lock:
            return list(zip(self._times.get(job, []), self._lines.get(job, []), strict=True))


class Jobs:
    """Launchers started on namespace hosts; :meth:`stop` ends every process of every host used."""

    def __init__(self, namespaces: Sequence[str]) -> None:
        self.namespaces = tuple(namespaces)
        self.output = Output()
        self.processes: list[subprocess.Popen[str]] = []
        self._readers: list[threading.Thread] = []

    def start(self, process: subprocess.Popen[str]) -> None:
        """Read a started launcher's stdout and stderr (both piped) into :attr:`output`."""
        number = len(self.processes)
        self.processes.append(process)
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            reader = threading.Thread(target=self.output.read, args=(number, stream), daemon=True)
            reader.start()
            self._readers.append(reader)

    def wait_for(self, found: Callable[[list[Step]], Step | None], seconds: float) -> Step | None:
        """The step ``found`` picks from the steps so far, polled until it picks one, every launcher
        has exited, or ``seconds`` pass (then None)."""
        deadline = time.monotonic() + seconds
        while True:
            step = found(self.output.steps())
            if step is not None:
                return step
            if all(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                time.sleep(0.2)  # the last lines of a launcher that just ended
                return found(self.output.steps())
            time.sleep(0.02)

    def why_not(self, job: int) -> str:
        """What launcher ``job`` said last that reads as its reason: its ``error:`` line (the resolver
        CLI's, with its help), else its last line naming an error or exception, else its exit."""
        lines = self.output.lines(job)
        code = self.processes[job].poll()
        ended = "still running" if code is None else f"exit code {code}"
        for number, line in enumerate(lines):
            if line.startswith("error: "):
                help_lines = [ln.strip() for ln in lines[number + 1 : number + 3] if ln.strip().startswith("= help")]
                return f"{ended}: {' '.join([line, *help_lines])}"
        for line in reversed(lines):
            if re.search(r"Error|Exception|error:|failed|refused", line) and not line.lstrip().startswith("File "):
                return f"{ended}: {line.strip()[:300]}"
        return f"{ended}, nothing said" if not lines else f"{ended}: {lines[-1].strip()[:300]}"

    def refused(self, job: int) -> bool:
        """Launcher ``job`` exited with an error of its own (the resolver CLI's ``error:`` line) before
        any rank trained: it does not do what it was asked, as opposed to failing at it."""
        code = self.processes[job].poll()
        lines = self.output.lines(job)
        return code not in (None, 0) and not self.output.steps() and any(ln.startswith("error: ") for ln in lines)

    def stop(self) -> None:
        """SIGTERM to each launcher still running (it stops its ranks), then SIGKILL to every process
        left in the hosts' namespaces; the pipes are read to their end."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(p.poll() is None for p in self.processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        for namespace in self.namespaces:
            kill_every_process(namespace)
        for process in self.processes:
            process.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=10)
        for process in self.processes:
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def start_in(
    namespace: str, argv: Sequence[str], env: Mapping[str, str], hostname: str | None
) -> subprocess.Popen[str]:
    """``argv`` in ``namespace`` with exactly ``env``, under its own ``hostname`` (a UTS namespace, as
    ``two_hosts_support.Host.start`` does) or, with None, under this machine's name."""
    named = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname] if hostname else []
    return subprocess.Popen(["ip", "netns", "exec", namespace, *named, *argv], env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def processes_in(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
    return [int(pid) for pid in listed.stdout.split()]


def kill_every_process(namespace: str, seconds: float = 10) -> None:
    """``kill -9`` of every process in ``namespace``, again until none is left (or ``seconds`` pass)."""
    deadline = time.monotonic() + seconds
    while (pids := processes_in(namespace)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def launcher_environment(base: Mapping[str, str], tmp: str, extra: Mapping[str, str]) -> dict[str, str]:
    """``base`` without the variables of a launch around this one, with ``TMPDIR`` (where torchrun's and
    resolver run's folders go, removed afterwards) and ``extra``."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "ROLE_RANK")
    env = {k: v for k, v in base.items() if k not in drop and not k.startswith("TORCHELASTIC_")}
    return {**env, "TMPDIR": tmp, **extra}
