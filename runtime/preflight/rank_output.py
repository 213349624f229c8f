"""What a check's rank printed, read back for the report: the line that says why it ended.

A rank's output may end in torch's C++ log (where the user chose a level that shows it): a
``[W1128 18:26:35.7597 TCPStore.cpp:340] [c10d] ... retrying`` line, then ``Exception raised
from ...`` and a stack of ``frame #N: ...`` lines down to ``_start``. None of that says why the
rank ended; the report quotes the last line that does, the Python error usually.
"""

from __future__ import annotations

import re

__all__ = ["last_meaningful_line"]

#: The longest quote, in characters.
LONGEST = 300

_STACK = re.compile(r"^(frame #\d+: |<omitting python frames>|Exception raised from \S+ at )")
_CPP_LOG = re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ [^\]]*\] ")


def last_meaningful_line(text: str) -> str:
    """The last line of ``text`` that is not part of a C++ stack; a C++ log line (its prefix cut)
    only where no other line is left; "" when there is none."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not _STACK.match(line)]
    plain = [line for line in lines if not _CPP_LOG.match(line)]
    if plain:
        return plain[-1][:LONGEST]
    return _CPP_LOG.sub("", lines[-1])[:LONGEST] if lines else ""
