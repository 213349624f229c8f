"""Colour on a terminal: the verdicts (``ok``/``PASS``, ``FAIL``, ``WARN``) and the errors (``error[...]``,
``= help:``) of every command, as the commands print them.

``--color auto`` (the default) colours a stream that is a terminal, unless ``NO_COLOR`` is set to
anything non-empty (https://no-color.org) or ``TERM=dumb``, or in a rank that Open MPI's ``mpirun``
started (its ranks' output goes through a pseudo-terminal of mpirun's, wherever mpirun's own goes: a
file, a pipe); ``FORCE_COLOR`` set to anything non-empty
colours a stream that is not a terminal too. ``--color always`` and ``--color never`` decide alone.
When a stream is not coloured nothing is changed at all: :func:`install` leaves it as it was.

The colour is added line by line as the text leaves the process (:class:`_ColoredLines`), so a
command prints plain text and needs no colour of its own; each line is matched at its start only.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

__all__ = ["COLOR_CHOICES", "add_color_option", "color_choice", "color_line", "install", "wants_color"]

COLOR_CHOICES = ("auto", "always", "never")

_RESET = "\033[0m"
_RED, _GREEN, _YELLOW, _BLUE, _CYAN, _DIM = "\033[1;31m", "\033[32m", "\033[33m", "\033[34m", "\033[1;36m", "\033[2m"

# (pattern at the start of a line, the colour of each of its groups, in order)
_LINES: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = (
    # error: / error[rule]: / argparse's resolver: error: and resolver explain: error:
    (re.compile(r"^((?:resolver(?: \w+)?: )?error(?:\[[^\]]*\])?:)"), (_RED,)),
    (re.compile(r"^(\s*)(= help:)"), ("", _CYAN)),
    (re.compile(r"^(\s*)(-->)"), ("", _BLUE)),
    (re.compile(r"^(FAIL|FAILED)\b"), (_RED,)),
    (re.compile(r"^(ok|PASS|passed)\b"), (_GREEN,)),
    (re.compile(r"^(WARN)\b"), (_YELLOW,)),
    (re.compile(r"^(skip)\b"), (_DIM,)),
    (re.compile(r"^\d+ checks, (passed)"), (_GREEN,)),
    (re.compile(r"^\d+ checks, (FAILED)"), (_RED,)),
    (re.compile(r"^(resolver (?:run|check): (?:rank \d+ failed|pre-empted|.* timed out))"), (_RED,)),
    (re.compile(r"^\d+ passed, ([1-9]\d* failed)"), (_RED,)),
)


def color_line(line: str) -> str:
    """``line`` (without its newline) with the colour of the first pattern its start matches."""
    for pattern, colors in _LINES:
        match = pattern.match(line)
        if match is None:
            continue
        pieces, end = [], 0
        for group, color in enumerate(colors, 1):
            start, stop = match.span(group)
            pieces.append(line[end:start])
            text = line[start:stop]
            pieces.append(f"{color}{text}{_RESET}" if color and text else text)
            end = stop
        return "".join(pieces) + line[end:]
    return line


def add_color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color",
        choices=COLOR_CHOICES,
        default="auto",
        help="colour the verdicts and errors: auto (default: on a terminal, unless NO_COLOR is set; "
        "FORCE_COLOR colours a pipe too), always, never",
    )


def color_choice(argv: Sequence[str]) -> str:
    """The ``--color`` of a command line, read before it is parsed (so that its usage errors are
    coloured too); ``auto`` when it has none, or one that is not a choice (parsing says why)."""
    for index, word in enumerate(argv):
        if word == "--":
            break
        value = argv[index + 1] if word == "--color" and index + 1 < len(argv) else word.removeprefix("--color=")
        if word.startswith("--color") and value != word:
            return value if value in COLOR_CHOICES else "auto"
    return "auto"


#: Variables of a launcher that hands its ranks a pseudo-terminal and forwards what they print (Open MPI's
#: mpirun, PMIx launchers): a terminal there says nothing of where the output ends up.
_FORWARDED_BY = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def wants_color(choice: str, stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is coloured for ``--color choice`` (in ``environ``, default this process's)."""
    if choice != "auto":
        return choice == "always"
    environ = os.environ if environ is None else environ
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    if environ.get("TERM") == "dumb" or any(name in environ for name in _FORWARDED_BY):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or an object without isatty
        return False


def install(choice: str) -> Callable[[], None]:
    """Colour this process's stdout and stderr where :func:`wants_color` says so; returns what undoes it."""
    replaced: list[tuple[str, TextIO]] = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and wants_color(choice, stream):
            replaced.append((name, stream))
            setattr(sys, name, _ColoredLines(stream))

    def undo() -> None:
        for name, stream in replaced:
            current = getattr(sys, name)
            if isinstance(current, _ColoredLines):
                current.flush()
            setattr(sys, name, stream)

    return undo


class _ColoredLines(io.TextIOBase):
    """A text stream that writes each whole line to ``stream`` coloured (:func:`color_line`); a partial
    line (a prompt) is written as it is when flushed. Everything else is ``stream``'s."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:  # a line-buffered stream (a terminal, stderr) flushes it
            self._stream.write("".join(color_line(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._stream.write(self._partial)
            self._partial = ""
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
