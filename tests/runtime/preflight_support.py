"""What the tests of ``resolver check`` share: the environment its processes start in, and the check's
rank processes still alive (``/proc``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")
_FOREIGN = ("MASTER_", "RESOLVER_", "SLURM_", "TORCHELASTIC_", "OMPI_", "PMI")


def check_environment(**extra: str) -> dict[str, str]:
    """This environment without any launcher's, rank's or resolver's variable, this checkout first on
    ``PYTHONPATH``, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN) and k not in _RANK_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def check_ranks(matches: Callable[[list[bytes]], bool]) -> list[int]:
    """The pids of the check's rank processes (``runtime.preflight.rank``) whose command line's words
    ``matches`` accepts."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"runtime.preflight.rank" in words and matches(words):
            found.append(int(entry.name))
    return found
