"""What a rule table is made of: its files (:class:`RuleSource`) and its slots (:class:`Slot`).

Every process reads the rule files (their text keys the compiled table's disk cache) and every
compiled table holds its slots; what the files declared, merged (:class:`~resolver._engine.declared.TableData`,
in its own module so that a process served by the cache never makes those classes), is built by
:mod:`resolver._engine.loading` (parsing, checking and merging the files), imported only when a table is
compiled, and expanded by :mod:`resolver._engine.cases`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

import attrs

from resolver._engine.errors import RuleTableError
from resolver._engine.input_files import InputFileError, read_bytes
from resolver._engine.slot_types import SLOT_TYPES, VARIABLE_PREFIX, fits
from resolver._engine.values import fields_repr, lean_state

__all__ = [
    "SLOT_TYPES",
    "VARIABLE_PREFIX",
    "RuleSource",
    "Slot",
    "read_folder",
    "read_sources",
    "rule_files",
    "toml_key_pattern",
]

#: The name of the rule source :mod:`resolver._domain.flags` writes for the flags' own slots; it shows in
#: messages and ``docs/rules.md``. Loading errors about those slots name the file that changed
#: what they need instead (they are not the user's to edit).
FLAGS_SOURCE_NAME = "<flags: resolver/_domain/flags.py>"


@attrs.frozen(eq=False)
class RuleSource:
    """One rule file's text and the name used in messages."""

    name: str
    text: str

    __repr__ = fields_repr

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> RuleSource:
        from pathlib import Path  # the name as a path prints it (``./a.toml`` is ``a.toml``)

        return cls._read(str(Path(path)))

    @classmethod
    def _read(cls, name: str) -> RuleSource:
        try:
            data = read_bytes(name, "rule file")
        except OSError as exc:
            raise RuleTableError(f"cannot read rule file: {exc.strerror}", file=name) from exc
        except InputFileError as exc:
            raise RuleTableError(f"{exc.problem}; {exc.hint}", file=name) from None
        try:
            return cls(name, data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise RuleTableError(
                f"not UTF-8 text: byte {data[exc.start]:#04x} at offset {exc.start} ({exc.reason}); "
                "save the file as UTF-8",
                file=name,
                line=line,
            ) from exc


@lean_state(domain=None, required=False, default=None, doc="", lowercase=False, file=None, line=None)
@attrs.frozen(eq=False, slots=False)  # a dict class: the disk cache restores it without a Python call
class Slot:
    """A named value the rules read or decide, owned by exactly one stage."""

    name: str
    stage: str
    type: str = "any"
    domain: str | None = None
    nullable: bool = False
    required: bool = False
    default: Any = None
    doc: str = ""
    lowercase: bool = False
    file: str | None = None
    line: int | None = None

    __repr__ = fields_repr

    def accepts(self, value: Any) -> bool:
        """Whether a constant a rule sets (None for ``"none"``) fits this slot's type and nullability."""
        if value is None:
            return self.nullable
        return fits(self.type, value)


def read_sources(paths: Iterable[str | os.PathLike[str]]) -> list[RuleSource]:
    """The rule sources of the given files or folders (a folder's ``*.toml`` files at any depth, in
    the order of :func:`rule_files`)."""
    from pathlib import Path

    sources: list[RuleSource] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            sources.extend(RuleSource._read(name) for name in rule_files(str(p)))
        else:
            sources.append(RuleSource.from_path(p))
    return sources


def read_folder(folder: str) -> list[RuleSource]:
    """The rule files of ``folder`` (an absolute, normalized path): :func:`read_sources` for one
    folder, with ``os`` alone (``pathlib`` costs every process a few milliseconds to import)."""
    return [RuleSource._read(name) for name in rule_files(folder)]


def rule_files(folder: str, _seen: frozenset[str] = frozenset()) -> list[str]:
    """The ``*.toml`` files under ``folder``: its own, by name, then each subfolder's, the same way,
    in the order of the subfolders' names (``rules/flags.toml`` before ``rules/accelerators/cpu.toml``).

    The order decides nothing a rule means (stages, priorities and ids do); it only fixes which file
    a message names first, and it is the same on every machine. A link back to a folder above is
    not followed (it would never end). An entry named ``*.toml`` that is not a regular file (a
    FIFO, a device) is an error: it was not named on its own, and reading it could wait forever.
    """
    seen = _seen | {os.path.realpath(folder)}
    files: list[str] = []
    folders: list[str] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():
                folders.append(entry.path)
            elif entry.name.endswith(".toml"):
                if not entry.is_file() and os.path.exists(entry.path):  # a FIFO would be waited on forever
                    raise RuleTableError(
                        "not a regular file: a rule folder's *.toml entries are read as rule files; "
                        "move it out of the folder or rename it",
                        file=entry.path,
                    )
                files.append(entry.path)
    files.sort()
    for sub in sorted(folders):
        if os.path.realpath(sub) not in seen:
            files += rule_files(sub, seen)
    return files


def toml_key_pattern(name: str) -> str:
    """A regex for the TOML key ``name``, bare or quoted."""
    return "(?:" + "|".join((re.escape(f'"{name}"'), re.escape(f"'{name}'"), re.escape(name))) + ")"
