"""The rule files added to the built-in table, each with what named it: the ``RESOLVER_RULES``
variable (site rules, applied to every ``resolve()``), a flags file's ``rules`` key, and
``rules=`` / ``--rules``.

A path that cannot be used is a :class:`ResolutionError` naming the variable, flags file line or
argument it came from, and the fix. Rule files are TOML data: nothing here imports or runs them.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from resolver._engine.errors import ResolutionError, RuleTableError
from resolver._engine.table import rule_files

__all__ = ["RULES_VARIABLE", "RuleFile", "given_rule_files", "listed_rule_files", "named_by", "site_rule_files"]

#: The variable naming site rule files and folders, separated by ``os.pathsep`` as ``PATH`` is.
RULES_VARIABLE = "RESOLVER_RULES"

#: What ``kind`` each source of a rule file is, as :meth:`RuleFile.describe` words it.
_KIND_WORDS = {"variable": "variable", "flags_file": "flags file", "argument": "argument"}


@attrs.frozen
class RuleFile:
    """A rule file or folder added to the table: ``path`` as it is opened, ``kind`` of source
    (``variable``, ``flags_file`` or ``argument``) and ``source`` (``RESOLVER_RULES``,
    ``train.toml:3``, ``--rules``)."""

    path: str
    kind: str
    source: str
    #: The fix for a path of this source that cannot be used.
    fix: str = attrs.field(default="", eq=False, repr=False)

    def describe(self) -> str:
        """``variable RESOLVER_RULES``, ``flags file train.toml:3 (rules)``, ``argument --rules``."""
        text = f"{_KIND_WORDS.get(self.kind, self.kind)} {self.source}"
        return f"{text} (rules)" if self.kind == "flags_file" else text

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "source": self.source}

    def error(self, what: str, reason: str, hint: str | None = None) -> ResolutionError:
        """``cannot read rule file PATH (from variable RESOLVER_RULES): REASON``, with the fix."""
        return ResolutionError(f"{what} {self.path} (from {self.describe()}): {reason}", hint=hint or self.fix)


def site_rule_files(environ: Mapping[str, str] | None = None) -> tuple[RuleFile, ...]:
    """The rule files ``RESOLVER_RULES`` names (none when it is unset or empty), each checked."""
    value = (os.environ if environ is None else environ).get(RULES_VARIABLE)
    if not value:
        return ()
    files = _parse_variable(value)
    for file in files:
        _check(file)
    return files


@functools.lru_cache(maxsize=8)
def _parse_variable(value: str) -> tuple[RuleFile, ...]:
    fix = (
        f"correct the entry in {RULES_VARIABLE} (rule files and folders separated by {os.pathsep!r}, as in PATH), "
        f"or unset {RULES_VARIABLE}"
    )
    entries = value.split(os.pathsep)
    for number, entry in enumerate(entries, 1):
        if not entry.strip():
            raise ResolutionError(
                f"{RULES_VARIABLE}={value!r}: entry {number} of {len(entries)} is empty",
                hint=f"remove the extra {os.pathsep!r} (an empty entry is not the current folder here, as it is in "
                "PATH; write '.' for that)",
            )
    return tuple(RuleFile(entry, "variable", RULES_VARIABLE, fix) for entry in entries)


def listed_rule_files(value: Any, flags_file: str, line: str) -> tuple[RuleFile, ...]:
    """The rule files of a flags file's ``rules = [...]`` (``line``: ``train.toml:3``), relative to
    its folder; raises a :class:`ResolutionError` naming the line for anything else."""
    items = [value] if isinstance(value, str) else value
    hint = 'write rules = ["site.toml", "site-rules/"]: rule files and folders, relative to the flags file'
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ResolutionError(f"{line}: rules = {value!r:.60} is not a list of paths", hint=hint)
    folder = os.path.dirname(flags_file)
    fix = f"correct the path in `rules` of {flags_file} (relative to its folder), or remove it"
    files = []
    for number, item in enumerate(items, 1):
        if not item.strip():
            raise ResolutionError(f"{line}: entry {number} of rules is empty", hint=hint)
        path = os.path.normpath(os.path.join(folder, item))
        files.append(RuleFile(path, "flags_file", line, fix))
    for file in files:
        _check(file)
    return tuple(files)


def given_rule_files(rules: Any, spelling: str = "rules=") -> tuple[RuleFile, ...]:
    """The paths of ``rules=`` (one path or several) or of ``--rules`` (``spelling``)."""
    if rules is None:
        return ()
    if isinstance(rules, (str, os.PathLike)) or not isinstance(rules, Iterable):
        items = [rules]
    else:
        items = list(rules)
    wrong = [item for item in items if not isinstance(item, (str, os.PathLike))]
    if wrong:
        raise ResolutionError(
            f"rules={wrong[0]!r} is not a rule file",
            hint="pass rules as a path, a list of paths, or a table from resolver.load_rules()",
        )
    fix = f"pass {spelling} the path of a rule file (*.toml) or of a folder of them"
    return tuple(RuleFile(os.fspath(item), "argument", spelling, fix) for item in items)


def cache_key(file: RuleFile) -> tuple[str, int, int]:
    """The file's real path, modification time and size (what keys a process's loaded tables);
    raises the file's error when it cannot be read."""
    path = os.path.realpath(file.path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise file.error("cannot read rule file", exc.strerror or str(exc)) from None
    return path, st.st_mtime_ns, st.st_size


def _check(file: RuleFile) -> None:
    """A path a variable or a flags file names must be a readable ``*.toml`` file or a folder
    holding some: it applies to every resolve, so a wrong one is said at once."""
    path, mtime, _ = cache_key(file)
    if _checked(path, mtime):
        return
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        if not os.access(path, os.R_OK | os.X_OK):
            raise file.error("cannot read rule folder", "Permission denied", _readable(file))
        try:
            found = rule_files(path)
        except (OSError, RuleTableError) as exc:
            reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else exc.message
            raise file.error("cannot read rule folder", reason) from None
        if not found:
            raise file.error("not a rule folder:", "it holds no *.toml file, at any depth")
    elif not file.path.endswith(".toml"):
        raise file.error(
            "not a rule file:",
            "rule files are TOML data named *.toml (Python plugins are installed as packages: docs/extending.md)",
        )
    elif not os.access(path, os.R_OK):
        raise file.error("cannot read rule file", "Permission denied", _readable(file))
    _CHECKED.add((path, mtime))


_CHECKED: set[tuple[str, int]] = set()


def _checked(path: str, mtime: int) -> bool:
    return (path, mtime) in _CHECKED


def _readable(file: RuleFile) -> str:
    return f"make it readable to you (chmod a+r), or {file.fix[0].lower()}{file.fix[1:]}"


def named_by(error: RuleTableError, files: Iterable[RuleFile]) -> RuleTableError:
    """``error`` (raised loading the table) with the variable or flags file that named its file."""
    if not error.file:
        return error
    broken = os.path.realpath(error.file)
    for file in files:
        if file.kind == "argument":
            continue
        named = os.path.realpath(file.path)
        if broken == named or broken.startswith(named.rstrip(os.sep) + os.sep):
            return RuleTableError(
                f"{error.message} (a rule file from {file.describe()}: fix the file, or take it out of "
                + (f"{RULES_VARIABLE})" if file.kind == "variable" else f"`rules` at {file.source})"),
                file=error.file,
                rule=error.rule,
                line=error.line,
            )
    return error
