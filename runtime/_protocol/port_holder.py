"""Which process listens on a TCP port of this machine, for the message about a busy rendezvous port.

Linux lists the listening sockets in ``/proc/net/tcp`` and ``/proc/net/tcp6`` (with the socket's
inode), and each process's descriptors in ``/proc/PID/fd`` (``socket:[INODE]``). Another user's
processes are not readable without privileges: then the port is known to be held, not by whom.
Nothing here is run or trusted: the files are read as text, and a name is shortened for a message.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["port_holder"]

_LISTEN = "0A"  # the TCP state "listening", as /proc/net/tcp writes it
_MAX_COMMAND = 120


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid 4520: python serve.py``: the process listening on ``port``; a sentence when the socket
    is there but its process cannot be read (another user's); None where this cannot be told
    (not Linux, no such socket)."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for entry in _processes(proc):
        try:
            descriptors = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                target = os.readlink(entry / "fd" / fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return f"pid {entry.name}: {_command(entry)}"
    return "a process this user cannot inspect (another user's: `sudo ss -ltnp` names it)"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            _, _, local_port = fields[1].rpartition(":")
            try:
                if int(local_port, 16) == port and fields[9] != "0":
                    inodes.add(fields[9])
            except ValueError:
                continue
    return inodes


def _processes(proc: Path) -> list[Path]:
    try:
        return [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def _command(entry: Path) -> str:
    try:
        words = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(word.decode(errors="replace") for word in words if word)
    if not text:
        return "?"
    name, _, rest = text.partition(" ")
    text = f"{os.path.basename(name)} {rest}".strip()  # the program's name, not its install path
    return text if len(text) <= _MAX_COMMAND else text[: _MAX_COMMAND - 3] + "..."
