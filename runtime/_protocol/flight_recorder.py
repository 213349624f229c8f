"""torch's flight recorder, read from a hung rank while it hangs.

torch records each rank's last collectives (``TORCH_FR_BUFFER_SIZE`` entries: gloo and NCCL alike; the
launcher sets a bounded size unless the user set one, :data:`BUFFER_VARIABLES`). Reading the record takes
Python code in the rank, which its main thread cannot run while it is blocked in a collective, so each
rank keeps a thread blocked on a named pipe in the launch's report folder (``rank-N.fr-request``): it
costs nothing until the launcher, diagnosing a stall or a timeout, opens the pipe. The thread then writes
torch's dumps as JSON (``rank-N.flight-recorder.json``: ``{"NCCL": ..., "CPU": ...}``, each recorder
this torch has), which the launcher reads, summarises in the error (:func:`summary`) and hands over whole
(``LaunchTimeoutError.flight_recorder``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "BUFFER_SIZE",
    "BUFFER_VARIABLES",
    "answer_requests",
    "dump",
    "request_dumps",
    "summary",
    "without_own_thread",
]

#: The entries each rank keeps (torch's own default, written out so that a run says what it records).
BUFFER_SIZE = 2000
#: torch's variables for the size; the first is the current name, the second NCCL's older one.
BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Seconds the launcher waits for the dumps (each is written by a thread of a running rank).
DUMP_WAIT = 3.0
#: Seconds a rank's pipe may have no reader before the rank is left out (its thread not yet waiting).
PIPE_WAIT = 1.0
_HERE = os.path.basename(__file__)
_answering: list[int] = []  # the processes that answer (once per process; a forked child starts its own)


def _request_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank-{rank}.fr-request")


def _dump_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank-{rank}.flight-recorder.json")


#: torch's recorders, each with its own dump (torch's debug server lists the same two): NCCL's is
#: compiled into CUDA builds only; the other records gloo and every other CPU backend.
RECORDERS = (("NCCL", "_dump_nccl_trace_json"), ("CPU", "_dump_fr_trace_json"))


def dump() -> dict[str, Any]:
    """This process's flight records as torch dumps them, by recorder, or why there is none (read from any
    thread: a launching process that is itself a rank is read by its supervising thread)."""
    try:
        from torch._C import _distributed_c10d as c10d
    except Exception as exc:  # a build without distributed
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    records: dict[str, Any] = {}
    failures = []
    for recorder, name in RECORDERS:
        read = getattr(c10d, name, None)
        if read is None:
            continue
        try:
            records[recorder] = json.loads(read())
        except Exception as exc:  # torch's own failure: said, and the other recorder still read
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    if not records:
        return {"unavailable": "; ".join(failures) or "this torch has no flight recorder dump"}
    return records


def _answer(directory: str, rank: int) -> None:
    request = _request_path(directory, rank)
    while True:
        try:
            with open(request, "rb") as pipe:  # blocks (outside the GIL) until the launcher opens it
                pipe.read(1)
        except OSError:
            return  # the report folder is gone: the launch ended
        target = _dump_path(directory, rank)
        with contextlib.suppress(OSError):
            with open(target + ".tmp", "w") as handle:
                json.dump(dump(), handle)
            os.replace(target + ".tmp", target)


def answer_requests(directory: str, rank: int) -> None:
    """In a rank: answer the launcher's requests for this process's flight record (from a daemon thread)."""
    if os.getpid() in _answering or not hasattr(os, "mkfifo"):
        return
    request = _request_path(directory, rank)
    try:
        os.mkfifo(request, 0o600)
    except FileExistsError:
        pass  # a rank restarted in the same folder
    except OSError:
        return
    _answering.append(os.getpid())
    threading.Thread(target=_answer, args=(directory, rank), name="runtime-flight-recorder", daemon=True).start()


def _open_pipe(path: str) -> int | None:
    """The rank's pipe, open for writing; None where the rank made none (not started by this runtime). A
    pipe with no reader yet (its thread just starting, or writing the last dump) is tried again, briefly."""
    deadline = time.monotonic() + PIPE_WAIT
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:  # ENXIO: nobody reads the pipe
                return None
        time.sleep(0.02)


def request_dumps(directory: str, ranks: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Ask ``ranks`` (running processes) for their flight records; the ones that answered within
    :data:`DUMP_WAIT` seconds. A rank without the thread (not started by this runtime) is not waited for."""
    asked = []
    for rank in ranks:
        with contextlib.suppress(FileNotFoundError):
            os.remove(_dump_path(directory, rank))
        fd = _open_pipe(_request_path(directory, rank))
        if fd is None:
            continue
        try:
            os.write(fd, b"!")
        finally:
            os.close(fd)
        asked.append(rank)
    dumps: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + DUMP_WAIT
    while len(dumps) < len(asked) and time.monotonic() < deadline:
        for rank in asked:
            if rank not in dumps:
                with contextlib.suppress(OSError, ValueError):
                    with open(_dump_path(directory, rank)) as handle:
                        dumps[rank] = json.load(handle)
        time.sleep(0.05)
    return dumps


def without_own_thread(stack: str) -> str:
    """A rank's stack dump (faulthandler's, every thread) less the thread that answers for the record:
    it waits on its pipe, which is nothing the user's code did."""
    threads = re.split(r"\n\n(?=(?:Current thread|Thread) 0x)", stack)
    kept = [thread for thread in threads if f'{_HERE}", line' not in thread or " in _answer" not in thread]
    return "\n\n".join(kept)


def _last_collectives(dump: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The last recorded collective of each process group."""
    last: dict[str, dict[str, Any]] = {}
    for entry in dump.get("entries") or ():
        if not isinstance(entry, dict):
            continue
        group = entry.get("process_group")
        name = str(group[1] if isinstance(group, list) and len(group) > 1 else entry.get("pg_id", "?"))
        if name not in last or int(entry.get("collective_seq_id", 0)) >= int(last[name].get("collective_seq_id", 0)):
            last[name] = entry | {"group": name}
    return sorted(last.values(), key=lambda entry: entry["group"])


def summary(dumps: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """One line per rank and process group: the last collective torch recorded, its number and state."""
    lines = []
    for rank, dump in sorted(dumps.items()):
        if "unavailable" in dump:
            lines.append(f"rank {rank}: no record ({dump['unavailable']})")
            continue
        entries = [(recorder, entry) for recorder, record in dump.items() if isinstance(record, dict)
                   for entry in _last_collectives(record)]  # fmt: skip
        if not entries:
            lines.append(f"rank {rank}: no collective recorded")
        for recorder, entry in entries:
            operation = str(entry.get("profiling_name", "?")).rpartition(":")[2]
            sizes = entry.get("input_sizes") or []
            dtypes = entry.get("input_dtypes") or []
            shown = ", ".join(f"{dtype} {size}" for dtype, size in zip(dtypes, sizes, strict=False))
            where = f"{entry['group']}, {recorder}" if recorder != "CPU" else entry["group"]
            lines.append(f"rank {rank}: {operation} #{entry.get('collective_seq_id', '?')} of {where} "
                         f"({shown or 'no input'}), {entry.get('state', '?')}")  # fmt: skip
    return lines
