"""What a rule table is made of: its files (:class:`RuleSource`) and its slots (:class:`Slot`).

Every process reads the rule files (their text keys the compiled table's disk cache) and every
compiled table holds its slots; what the files declared, merged (:class:`TableData`), is built by
:mod:`resolver.loading` (parsing, checking and merging the files), imported only when a table is
compiled, and expanded by :mod:`resolver.cases`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver.errors import RuleTableError
from resolver.values import fields_repr

if TYPE_CHECKING:
    from resolver.schema import RuleSpec

__all__ = [
    "Domain",
    "RawRule",
    "RuleCase",
    "RuleSource",
    "Slot",
    "TableData",
    "read_folder",
    "read_sources",
    "toml_key_pattern",
]

SLOT_TYPES = ("str", "int", "bool", "tuple", "mapping", "any")
VARIABLE_PREFIX = "var."
#: The name of the rule source :mod:`resolver.flags` writes for the flags' own slots; it shows in
#: messages and ``docs/rules.md``. Loading errors about those slots name the file that changed
#: what they need instead (they are not the user's to edit).
FLAGS_SOURCE_NAME = "<flags: resolver/flags.py>"


@attrs.frozen
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
            with open(name, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise RuleTableError(f"cannot read rule file: {exc.strerror}", file=name) from exc
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


@attrs.frozen
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
    file: str | None = attrs.field(default=None, eq=False)
    line: int | None = attrs.field(default=None, eq=False)

    __repr__ = fields_repr

    def accepts(self, value: Any) -> bool:
        """Whether a constant a rule sets (None for ``"none"``) fits this slot's type and nullability."""
        if value is None:
            return self.nullable
        expected = _PYTHON_TYPES.get(self.type)
        if expected is None:
            return True
        return isinstance(value, expected) and not (self.type == "int" and isinstance(value, bool))


_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "bool": bool,
    "tuple": tuple,
    "mapping": Mapping,
}


def read_sources(paths: Iterable[str | os.PathLike[str]]) -> list[RuleSource]:
    """The rule sources of the given files or folders (``*.toml`` in a folder, sorted)."""
    from pathlib import Path

    sources: list[RuleSource] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            sources.extend(RuleSource.from_path(f) for f in sorted(p.glob("*.toml")))
        else:
            sources.append(RuleSource.from_path(p))
    return sources


def read_folder(folder: str) -> list[RuleSource]:
    """The ``*.toml`` files of ``folder`` (an absolute, normalized path), sorted: :func:`read_sources`
    for one folder, with ``os`` alone (``pathlib`` costs every process a few milliseconds to import)."""
    with os.scandir(folder) as entries:
        names = sorted(entry.path for entry in entries if entry.name.endswith(".toml"))
    return [RuleSource._read(name) for name in names]


@attrs.define
class Domain:
    """A named set of accepted string values; ``include`` pulls in other domains."""

    values: set[str] = attrs.field(factory=set)
    include: set[str] = attrs.field(factory=set)
    #: Where each ``include`` was written (file, line), for errors.
    where: dict[str, tuple[str, int | None]] = attrs.field(factory=dict)
    #: The files that declare or extend this domain, for errors.
    files: list[str] = attrs.field(factory=list)
    #: The file that first gave each value, for errors.
    value_files: dict[str, str] = attrs.field(factory=dict)

    __repr__ = fields_repr


@attrs.frozen
class RuleCase:
    """One case of a rule with ``match``, as written: the slot's value and that value's outcome."""

    rule: str
    value: str
    data: Mapping[str, Any]
    file: str
    line: int | None

    __repr__ = fields_repr

    def error(self, message: str) -> RuleTableError:
        return RuleTableError(f"case {self.value!r}: {message}", file=self.file, rule=self.rule, line=self.line)


@attrs.frozen
class RawRule:
    """A rule as written, with where it was written.

    A rule expanded from a case (:mod:`resolver.cases`) has ``case_of``, the id of the rule whose
    ``cases`` held it, and ``case``; its errors name both, at the case's line.
    """

    data: Mapping[str, Any]
    file: str
    line: int | None
    spec: RuleSpec | None = attrs.field(default=None, eq=False, repr=False)
    cases: tuple[RuleCase, ...] = attrs.field(default=(), eq=False, repr=False)
    case_of: str | None = None
    case: str | None = None

    __repr__ = fields_repr

    @property
    def id(self) -> str:
        return str(self.data.get("id", "<no id>"))

    def error(self, message: str) -> RuleTableError:
        if self.case_of is not None:
            return RuleTableError(f"case {self.case!r}: {message}", file=self.file, rule=self.case_of, line=self.line)
        return RuleTableError(message, file=self.file, rule=self.id, line=self.line)


@attrs.define
class TableData:
    """Everything the rule files declared, merged, before compilation."""

    stages: list[str] = attrs.field(factory=list)
    slots: dict[str, Slot] = attrs.field(factory=dict)
    domains: dict[str, Domain] = attrs.field(factory=dict)
    rules: list[RawRule] = attrs.field(factory=list)
    removed: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    files: list[str] = attrs.field(factory=list)
    #: The file and line of the ``stages`` list, once a file gave it.
    stages_from: tuple[str, int | None] | None = None

    __repr__ = fields_repr

    def stages_said(self) -> str:
        """``stages are a, b, c (`stages` in FILE:LINE)``: the other side of an unknown-stage error."""
        where = ""
        if self.stages_from is not None:
            file, line = self.stages_from
            where = f" (`stages` in {file}{f':{line}' if line else ''})"
        return f"stages are {', '.join(self.stages)}{where}"

    def domain_files(self, name: str, _seen: tuple[str, ...] = ()) -> list[str]:
        """The files that give a domain its values, its included domains' files too."""
        domain = self.domains.get(name)
        if domain is None or name in _seen:
            return []
        files = list(domain.files)
        for inner in sorted(domain.include):
            files += [f for f in self.domain_files(inner, (*_seen, name)) if f not in files]
        return files

    def value_file(self, name: str, value: str, _seen: tuple[str, ...] = ()) -> str | None:
        """The file that gave ``value`` to domain ``name`` or to a domain it includes."""
        domain = self.domains.get(name)
        if domain is None or name in _seen:
            return None
        if value in domain.value_files:
            return domain.value_files[value]
        found = (self.value_file(inner, value, (*_seen, name)) for inner in sorted(domain.include))
        return next((file for file in found if file is not None), None)

    def expand_domain(self, name: str, _seen: tuple[str, ...] = ()) -> frozenset[str]:
        domain = self.domains[name]
        values = set(domain.values)
        for inner in sorted(domain.include):
            file, line = domain.where.get(inner, (None, None))
            if inner in _seen or inner == name:
                cycle = " -> ".join((*_seen, name, inner))
                raise RuleTableError(f"domain {name!r} includes itself ({cycle})", file=file, line=line)
            if inner not in self.domains:
                raise RuleTableError(
                    f"[domain.{name}] includes unknown domain {inner!r}; known domains: "
                    + ", ".join(sorted(self.domains)),
                    file=file,
                    line=line,
                )
            values |= self.expand_domain(inner, (*_seen, name))
        return frozenset(values)

    def slot(self, name: str) -> Slot | None:
        if name in self.slots:
            return self.slots[name]
        if name.startswith(VARIABLE_PREFIX) and len(name) > len(VARIABLE_PREFIX):
            return Slot(name=name, stage=self.stages[0] if self.stages else "input", type="str", nullable=True)
        return None


def toml_key_pattern(name: str) -> str:
    """A regex for the TOML key ``name``, bare or quoted."""
    return "(?:" + "|".join((re.escape(f'"{name}"'), re.escape(f"'{name}'"), re.escape(name))) + ")"
