"""Reading a file a user names (a flags file, a rule file, an environment snapshot, a golden
scenario): bounded in size and in nesting, so that no input makes resolver read without end or
overflow the parser's stack.

Size: at most :data:`MAX_FILE_BYTES` are read from any file. A regular file's size is checked
first (its ``fstat``); anything else (``/dev/zero``, a FIFO, ``<(command)``) is read up to the limit
and one byte more, never trusting what ``stat`` says of it, so ``--config /dev/zero`` is refused
after reading the limit, not when memory runs out. Such a stream is still read when it ends in
time: ``--config <(make-flags)`` works.

Nesting: TOML arrays and tables inside each other are parsed by recursion (``tomllib``), so a file
nested a thousand deep raised ``RecursionError``. The text is scanned for its deepest ``[``/``{``
(outside strings and comments) before it is parsed, and the parsed document (dotted keys nest
tables too) is measured after: deeper than :data:`MAX_NESTING` is an error naming the file and,
where it can, the line.

Both limits are far beyond what a real file needs: the largest built-in rule file is under 10 KiB
and nests 8 deep.
"""

from __future__ import annotations

import os
import re
from stat import S_ISCHR, S_ISFIFO, S_ISREG
from typing import Any

from resolver._engine.errors import ResolutionError

__all__ = ["MAX_FILE_BYTES", "MAX_NESTING", "InputFileError", "loads_toml", "read_bytes", "read_text"]

#: The most bytes resolver reads from a file a user names: four times a rule table 100 times the
#: built-in one (4.2 MiB, tests/benchmarks' growth case), far past any flags or environment file.
MAX_FILE_BYTES = 16 << 20
#: The deepest nesting of arrays and tables a TOML file a user names may have.
MAX_NESTING = 64


class InputFileError(ResolutionError):
    """A file a user named is beyond what resolver reads (too large, nested too deep): names the
    file, the limit and the fix. ``file`` is the path as given, ``line`` where it is known,
    ``problem`` the message without the file (for a caller that names it its own way)."""

    def __init__(self, what: str, file: str, problem: str, *, hint: str, line: int | None = None) -> None:
        self.file = file
        self.line = line
        self.problem = problem
        where = file if line is None else f"{file}:{line}"
        super().__init__(f"{what} {where}: {problem}", hint=hint)


def _size(n: int) -> str:
    if n < 1 << 20:
        return f"{n} bytes"
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n / (1 << 20):.1f} MiB"


def _kind(mode: int) -> str:
    if S_ISCHR(mode):
        return "a character device"
    if S_ISFIFO(mode):
        return "a pipe"
    return "a special file"


def read_bytes(path: str, what: str, *, hint: str | None = None) -> bytes:
    """The bytes of ``path`` (``what`` names it in messages: "flags file"), at most
    :data:`MAX_FILE_BYTES`. Raises :class:`InputFileError` past that (with ``hint``, by default
    "pass the TOML ``what`` you meant"), ``OSError`` as ``open`` does."""
    limit = MAX_FILE_BYTES
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        mode, size, regular = st.st_mode, st.st_size, S_ISREG(st.st_mode)
        if regular and size > limit:
            raise _too_large(path, what, _size(size), hint)
        # A regular file is read as big as it is (a read of the limit would cost each of the
        # built-in rule files, read by every process, about 50 us more); one that grows meanwhile,
        # or anything else, is read up to one byte past the limit.
        want = size + 1 if regular else limit + 1
        data = f.read(want)
        if len(data) == want and want <= limit:
            data += f.read(limit + 1 - want)
    if len(data) > limit:
        said = f"{_kind(mode)} that gave more than {_size(limit)}" if not regular else "it grew while read"
        raise _too_large(path, what, said, hint)
    return data


def read_text(path: str, what: str, *, hint: str | None = None) -> str:
    """:func:`read_bytes` decoded as UTF-8, newlines as ``Path.read_text`` gives them (``\\r\\n`` and
    ``\\r`` read as ``\\n``). Raises ``UnicodeDecodeError`` for what is not UTF-8."""
    text = read_bytes(path, what, hint=hint).decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _too_large(path: str, what: str, said: str, hint: str | None) -> InputFileError:
    return InputFileError(
        what,
        path,
        f"too large: {said} (resolver reads at most {_size(MAX_FILE_BYTES)} from a file it is given)",
        hint=hint or f"pass the TOML {what} you meant (real ones hold a few KiB)",
    )


#: What the nesting scan looks at: strings and comments (skipped whole, so a bracket inside one
#: does not count), an opening and a closing bracket or brace. A multi-line string ends at the
#: last of a run of quotes (TOML allows up to two quotes just before the closing three). Compiled
#: on first use (``re`` keeps it): every process reads rule files, few parse them.
_TOKENS = (
    r'"""(?:[^\\]|\\.)*?"""(?!")'
    r"|'''.*?'''(?!')"
    r'|"(?:[^"\\\n]|\\.)*"?'
    r"|'[^'\n]*'?"
    r"|#[^\n]*"
    r"|(?P<open>[\[{])"
    r"|(?P<close>[\]}])"
)


def _too_deep_line(text: str) -> int | None:
    """The line where the brackets and braces of ``text`` first nest deeper than :data:`MAX_NESTING`, or None."""
    depth = 0
    for match in re.finditer(_TOKENS, text, re.S):
        if match.group("open"):
            depth += 1
            if depth > MAX_NESTING:
                return text.count("\n", 0, match.start()) + 1
        elif match.group("close"):
            depth = max(depth - 1, 0)
    return None


def _depth(document: dict[str, Any]) -> int:
    """How deep tables and arrays nest in a parsed document (its top level is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > deepest:
            deepest = depth
        if depth > MAX_NESTING:
            break
        if isinstance(value, dict):
            stack.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, list):
            stack.extend((inner, depth + 1) for inner in value)
    return deepest


def loads_toml(text: str, path: str, what: str) -> dict[str, Any]:
    """``tomllib.loads(text)`` for the file ``path``, refused (:class:`InputFileError`) when it
    nests deeper than :data:`MAX_NESTING`. Raises ``tomllib.TOMLDecodeError`` for malformed TOML."""
    import tomllib

    line = _too_deep_line(text)
    if line is None:
        try:
            document = tomllib.loads(text)
        except RecursionError:  # what the scan cannot see; only a stack already deep gets here
            document = None
        if document is not None and _depth(document) <= MAX_NESTING:
            return document
    raise InputFileError(
        what,
        path,
        f"nested too deep: arrays and tables more than {MAX_NESTING} levels within each other "
        f"(resolver parses at most {MAX_NESTING})",
        line=line,
        hint=f"flatten it (resolver's own rule files nest 8 levels at most); is {path} the file you meant?",
    )
