"""The first host of a compressed SLURM-style host list (``node[001-004,007],login2``)."""

from __future__ import annotations

import re

__all__ = ["first_host"]

_BRACKET = re.compile(r"\[([^\]]*)\]")


def first_host(hostlist: str) -> str:
    """``"gpu[07-09,12],cpu1"`` -> ``"gpu07"``; each bracket keeps its first entry, padding included."""
    depth = 0
    end = len(hostlist)
    for index, char in enumerate(hostlist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            end = index
            break
    first = hostlist[:end].strip()

    def first_entry(match: re.Match[str]) -> str:
        return match.group(1).split(",")[0].split("-")[0].strip()

    return _BRACKET.sub(first_entry, first)
