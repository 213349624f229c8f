"""Room for the rank processes: refused before the first one starts when the machine surely cannot
hold them, and a clear error (not a raw ``BlockingIOError``) when the OS refuses one midway.

Before starting ``n`` ranks, :func:`check_room_for` compares them with what this machine lets this
user have:

- ``RLIMIT_NPROC`` (``ulimit -u``), where it applies (a user other than root, without
  ``CAP_SYS_RESOURCE`` or ``CAP_SYS_ADMIN``): the tasks (processes and threads) this user already
  runs plus one per rank must fit under it;
- on CPU, the cores: at most :data:`RANKS_PER_CORE` ranks per core this process may use;
- the memory available (``MemAvailable``): each rank needs at least ``per_rank`` bytes of its own
  (:data:`TORCH_RANK_MEMORY` for a fresh interpreter that imports torch, :data:`FORKED_RANK_MEMORY`
  for a copy of this process, :data:`PROGRAM_MEMORY` for any program).

These are lower bounds: a launch they let through may still be refused by the OS (each rank also
starts threads), and then :func:`start_refused` names the rank, the limit and the fix, and the
launcher stops the ranks it had started. Lightning accepts any device count; so does the resolver
(what fits depends on the machine the launch runs on, not on the flags; docs/behaviour.md).
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from runtime.errors import RuntimeConfigError

__all__ = [
    "FORKED_RANK_MEMORY",
    "PROGRAM_MEMORY",
    "RANKS_PER_CORE",
    "TORCH_RANK_MEMORY",
    "check_room_for",
    "start_refused",
]

_MIB = 1024 * 1024
#: The least memory a fresh interpreter that imports torch holds of its own (measured about 150 MiB
#: with torch 2.13 on CPU; half of it, so that no launch that fits is refused).
TORCH_RANK_MEMORY = 64 * _MIB
#: The least a forked copy of the launching process writes of its own (measured about 8 MiB).
FORKED_RANK_MEMORY = 4 * _MIB
#: The least any program started by ``resolver run`` holds (a bare Python: about 3 MiB).
PROGRAM_MEMORY = 2 * _MIB
#: The most CPU ranks a core may take: beyond it even joining the process group outlasts its timeout
#: (4096 forked ranks on 2 cores were still connecting to the rendezvous after its 300 s).
RANKS_PER_CORE = 32
#: The errors with which the OS refuses to start a process for want of room.
_NO_ROOM = (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE)
#: Capability bits that lift RLIMIT_NPROC (CAP_SYS_ADMIN, CAP_SYS_RESOURCE).
_LIFTING_CAPABILITIES = (1 << 21) | (1 << 24)


def _status(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _process_limit() -> int | None:
    """RLIMIT_NPROC's soft limit where it applies to this process, else None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY or os.getuid() == 0:
        return None
    try:
        capabilities = int(_status(Path("/proc/self/status")).get("CapEff", "0"), 16)
    except (OSError, ValueError):
        capabilities = 0
    return None if capabilities & _LIFTING_CAPABILITIES else soft


def _tasks_of_this_user() -> int:
    """The tasks (threads included) of processes whose real user is this process's: what
    RLIMIT_NPROC counts."""
    uid = str(os.getuid())
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _status(entry / "status")
        except OSError:
            continue  # gone meanwhile
        if fields.get("Uid", "").split()[:1] == [uid]:
            count += int(fields.get("Threads", "1"))
    return count


def _memory_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_room_for(ranks: int, per_rank: int, what: str, *, on_cpu: bool = False) -> None:
    """Refuse to start ``ranks`` processes (``what``: how the message names them) that this machine
    surely cannot hold, before any starts (module docstring); ``on_cpu``: each rank computes on the
    CPU cores, at most :data:`RANKS_PER_CORE` of them per core."""
    if ranks <= 0:
        return
    cores = _cores()
    if on_cpu and ranks > RANKS_PER_CORE * cores:
        raise RuntimeConfigError(
            f"cannot start {ranks} {what} on {cores} CPU core(s): at most {RANKS_PER_CORE} ranks per core can run "
            f"here (each would get 1/{ranks // cores} of a core: too little to join the process group within its "
            "timeout)",
            hint=f"ask for at most {RANKS_PER_CORE * cores} devices here (on CPU, a device is a process), or run "
            "on more machines (--num-nodes)",
        )
    limit = _process_limit() if Path("/proc").is_dir() else None
    if limit is not None:
        running = _tasks_of_this_user()
        if running + ranks > limit:
            raise RuntimeConfigError(
                f"cannot start {ranks} {what}: this user may run {limit} processes and threads (RLIMIT_NPROC, "
                f"ulimit -u) and already runs {running}, so at most {max(limit - running, 0)} more can start",
                hint=f"ask for fewer devices, or raise the limit (ulimit -u {running + ranks * 8} covers about "
                "8 threads per rank)",
            )
    available = _memory_available()
    if available is not None and ranks * per_rank > available:
        need, have = ranks * per_rank / 2**30, available / 2**30
        raise RuntimeConfigError(
            f"cannot start {ranks} {what}: each needs at least {per_rank // _MIB} MiB of memory of its own, "
            f"{need:.1f} GiB in all, and this machine has {have:.1f} GiB available",
            hint=f"ask for at most {max(available // per_rank, 1)} devices here (on CPU, a device is a process; "
            "more processes than cores only share them)",
        )


def start_refused(exc: OSError, rank: int, ranks: int, started: int) -> RuntimeConfigError | None:
    """The error for the OS refusing to start ``rank`` (``started`` of ``ranks`` already run), or None
    when ``exc`` is not a want of room; the launcher stops the ranks it started."""
    if exc.errno not in _NO_ROOM:
        return None
    limit = _process_limit()
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        why = f"the open-file limit (ulimit -n {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})"
    elif exc.errno == errno.ENOMEM:
        why = "the memory"
    else:
        why = "the number of processes and threads" + ("" if limit is None else f" (ulimit -u {limit})")
    return RuntimeConfigError(
        f"the OS refused to start rank {rank} ({os.strerror(exc.errno)}) after {started} of the {ranks} rank "
        f"processes had started (they were stopped): this machine ran out of {why}",
        hint="ask for fewer devices, or raise that limit",
    )
