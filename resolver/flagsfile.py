"""Flags files: the flags of ``resolve()`` written in TOML (``--config train.toml``).

The file has the shape of a golden scenario's ``[flags]`` table::

    [flags]
    strategy = "ddp"
    devices = 2
    precision = "bf16-mixed"

so ``resolver explain --config tests/golden/<scenario>.toml`` reads a scenario's flags (its
``description``, ``[environment]`` and ``[expect]`` are skipped: give the machine with
``--simulate tests/golden/<scenario>.toml``). A file without a ``[flags]`` table is read as a
bare flags table (``strategy = "ddp"`` at the top). Keys are the keyword names of ``resolve()``
(``num_nodes``, not ``num-nodes``); an unknown key is refused with the closest known names, a value
of the wrong type with the file, line and key. A flag given on the command line or as a keyword
of ``resolve()`` wins over the file; the values taken from the file carry a provenance of kind
``flags_file`` naming the file. ``rules = ["site.toml", "site-rules/"]`` (beside the flags) adds
rule files and folders, relative to the file's folder, to every resolve that reads the file.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from resolver._domain.config import Provenance
from resolver._domain.rule_files import RuleFile, listed_rule_files
from resolver._engine.errors import ResolutionError
from resolver._engine.input_files import loads_toml, read_text
from resolver._engine.suggest import did_you_mean

if TYPE_CHECKING:
    import cattrs

__all__ = ["FLAGS_FILE_KIND", "FlagsFile", "flags_with_file", "load_flags_file"]

#: The provenance kind of a value read from a flags file.
FLAGS_FILE_KIND = "flags_file"
#: The key of the rule files a flags file adds (a keyword of ``resolve()`` too, but no flag).
RULES_KEY = "rules"
#: The other top-level parts of a golden scenario, skipped so that a scenario is a flags file.
_SCENARIO_PARTS = ("description", "environment", "expect")

#: What each flag may be written as in TOML: the types ``resolve()`` takes for it (integers may be
#: text, as in variables: ``num_nodes = "2"``); the rules then check the value itself. A flag
#: declared in ``FLAG_DEFAULTS`` but missing here is taken as written. What a device list may hold
#: is checked in one place, ``parse_devices`` (resolver/_domain/functions.py), for a file as for resolve().
_TYPES: Mapping[str, Any] = {
    "accelerator": str,
    "devices": int | str | list[Any],
    "strategy": str,
    "precision": str | int,
    "num_nodes": int | str,
    "cluster_environment": str,
    "plugins": str | list[str],
    "node_rank": int | str,
    "master_addr": str,
    "master_port": int | str,
}
_TYPE_NAMES: Mapping[Any, str] = {str: "text", int: "an integer", list: "a list", Any: "value"}


@attrs.frozen
class FlagsFile:
    """The flags a file gives (only those it names), the file's path as the user wrote it, and the
    rule files its ``rules`` key adds."""

    path: str
    flags: Mapping[str, Any]
    rules: tuple[RuleFile, ...] = ()

    def without(self, names: Iterable[str]) -> FlagsFile:
        """This file less the flags ``names`` (given elsewhere, so overriding the file)."""
        drop = set(names)
        return FlagsFile(self.path, {k: v for k, v in self.flags.items() if k not in drop}, self.rules)

    def provenance(self, name: str) -> Provenance:
        return Provenance(FLAGS_FILE_KIND, f"{self.path}: {name}={self.flags[name]!r}")


class _Problem(Exception):
    """A value of the wrong type, found while structuring (turned into a ResolutionError)."""


def _type_name(kind: Any) -> str:
    args = typing.get_args(kind)
    if typing.get_origin(kind) is list:
        return f"a list of {_type_name(args[0]).removeprefix('an ').removeprefix('a ')}s"
    if args:
        names = [_type_name(a) for a in args]
        return ", ".join(names[:-1]) + " or " + names[-1]
    return _TYPE_NAMES.get(kind, getattr(kind, "__name__", str(kind)))


def _strict(value: Any, kind: Any) -> Any:
    """``value`` if it is a ``kind`` as written in TOML (no coercion: ``"2"`` is no integer)."""
    if kind is Any:
        return value
    args = typing.get_args(kind)
    if typing.get_origin(kind) is list:
        if isinstance(value, list):
            return [_strict(item, args[0]) for item in value]
    elif args:  # a union: the first member it is
        for member in args:
            try:
                return _strict(value, member)
            except _Problem:
                continue
    elif isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise _Problem(_type_name(kind))


_NOT_GIVEN: Any = object()


@functools.cache
def _flags_class(names: tuple[str, ...]) -> type:
    """An attrs class with one optional field per flag (built from the declared flags)."""
    fields = {name: attrs.field(type=_TYPES.get(name, Any), default=_NOT_GIVEN, kw_only=True) for name in names}
    return attrs.make_class("Flags", fields, frozen=True)


def _is_compound(kind: Any) -> bool:
    """A union (``int | str``) or a list type: structured by :func:`_strict` too."""
    return typing.get_origin(kind) in (types.UnionType, typing.Union, list)


@functools.cache
def _converter(cls: type) -> cattrs.Converter:
    """The strict converter for the flags class (cattrs is imported only when a flags file is read)."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn

    converter = cattrs.Converter(forbid_extra_keys=True)
    for plain in (str, int):  # cattrs would coerce these (int("2")); a flags file is read as written
        converter.register_structure_hook(plain, _strict)
    converter.register_structure_hook_func(_is_compound, _strict)
    converter.register_structure_hook(cls, make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True))
    return converter


def _line_of(text: str, key: str, table: str | None) -> int | None:
    """The line that sets ``key`` (in ``[table]`` when given), for the error message."""
    in_table = table is None
    name = rf'(?:"{re.escape(key)}"|\'{re.escape(key)}\'|{re.escape(key)})'
    pattern = re.compile(rf"^\s*(?:{name}\s*=|\[\[?\s*{name}\s*[.\]])")
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_table and pattern.match(line):
            return number
        if stripped.startswith("["):
            in_table = table is None or stripped.strip("[] ") == table
    return None


def _where(path: str, text: str, key: str, table: str | None) -> str:
    line = _line_of(text, key, table)
    return f"{path}:{line}" if line else path


def load_flags_file(path: str | os.PathLike[str], names: Iterable[str] | None = None) -> FlagsFile:
    """Read a flags file; ``names`` are the known flags (default: those of ``resolve()``).

    Raises :class:`ResolutionError` naming the file (and line) for anything it cannot use.
    """
    if names is None:
        from resolver._domain.flags import FLAG_DEFAULTS

        names = FLAG_DEFAULTS
    known = tuple(names)
    if not isinstance(path, (str, os.PathLike)):
        raise ResolutionError(
            f"config_file={path!r:.60} is not a path",
            hint="pass the path of a TOML flags file, or a FlagsFile from resolver.flagsfile.load_flags_file()",
        )
    shown = os.fspath(path)
    hint = 'write the flags as a [flags] table of TOML, e.g. [flags] strategy = "ddp" (see docs/usage.md)'
    try:
        text = read_text(shown, "flags file")
        document = loads_toml(text, shown, "flags file")
    except IsADirectoryError:
        raise ResolutionError(f"flags file {shown} is a folder", hint="pass the TOML file itself") from None
    except OSError as exc:
        raise ResolutionError(
            f"cannot read flags file {shown}: {exc.strerror}", hint="check the path given to --config (config_file=)"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ResolutionError(f"{shown}: not UTF-8 text ({exc.reason})", hint="save the file as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ResolutionError(f"{shown}: malformed TOML: {exc}", hint=hint) from exc
    table: str | None = "flags"
    if "flags" in document:
        flags = document["flags"]
        others = [k for k in document if k != "flags" and k not in _SCENARIO_PARTS]
        if others:
            raise _unknown(shown, text, others[0], None, ["flags", *_SCENARIO_PARTS], flags_table=True)
        if not isinstance(flags, dict):
            raise ResolutionError(
                f"{_where(shown, text, 'flags', None)}: `flags` must be a table, not {flags!r:.40}",
                hint="write [flags] on a line of its own, the flags below it",
            )
    else:
        flags, table = document, None
    flags = dict(flags)
    rules: tuple[RuleFile, ...] = ()
    if RULES_KEY in flags:
        rules = listed_rule_files(flags.pop(RULES_KEY), shown, _where(shown, text, RULES_KEY, table))
    unknown = [k for k in flags if k not in known]
    if unknown:
        _check_removed(shown, text, unknown[0], flags[unknown[0]], table)
        names = [*known, RULES_KEY] if table else [*known, RULES_KEY, "flags"]
        raise _unknown(shown, text, unknown[0], table, names, flags_table=False)
    cls = _flags_class(known)
    converter = _converter(cls)
    for key, value in flags.items():  # one key at a time, so the message names the key and line
        try:
            converter.structure({key: value}, cls)
        except BaseExceptionGroup as exc:  # cattrs' validation errors are exception groups
            problem = next((e for e in _leaves(exc) if isinstance(e, _Problem)), None)
            wanted = f"; {key} takes {problem}" if problem is not None else ""
            raise ResolutionError(
                f"{_where(shown, text, key, table)}: {_key(key, table)} = {value!r:.60} has the wrong type{wanted}",
                hint=f"write {key} as resolve() takes it (`resolver explain --help` lists the forms of each flag)",
            ) from None
    return FlagsFile(shown, flags, rules)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _key(key: str, table: str | None) -> str:
    return f"{table}.{key}" if table else key


def _check_removed(path: str, text: str, key: str, value: Any, table: str | None) -> None:
    """A removed flag (``gpus = 2``) is refused as ``resolve()`` refuses it, naming its replacement."""
    from resolver._domain.rule_tables import builtin_table, removed_flag_error

    error = removed_flag_error(builtin_table(), key, value)
    if error is not None:
        raise ResolutionError(
            f"{_where(path, text, key, table)}: {_key(key, table)}: {error.message}", hint=error.hint, rule=error.rule
        )


def _unknown(
    path: str, text: str, key: str, table: str | None, known: list[str], *, flags_table: bool
) -> ResolutionError:
    """An unknown flag, or (``flags_table``: the file has ``[flags]``) an unknown top-level key."""
    suggestion = did_you_mean(key, known)
    if flags_table:
        hint = (
            f"put the flags and {RULES_KEY} in the [flags] table; besides it a flags file may hold only "
            + ", ".join(_SCENARIO_PARTS)
            + " (the other parts of a golden scenario, not read)"
        )
    else:
        hint = "the flags are " + ", ".join(k for k in known if k not in ("flags", RULES_KEY))
        hint += f" (the keyword names of resolve()), and {RULES_KEY} (rule files), in a [flags] table or at the top"
        hint += " of the file"
    return ResolutionError(
        f"{_where(path, text, key, table)}: unknown {'key' if flags_table else 'flag'} {_key(key, table)!r}"
        + (f"; {suggestion}" if suggestion else ""),
        hint=hint,
    )


def flags_with_file(
    flags: Mapping[str, Any], defaults: Mapping[str, Any], file: FlagsFile | str | os.PathLike[str]
) -> tuple[dict[str, Any], dict[str, Provenance]]:
    """``flags`` (keywords of ``resolve()``) with the file's values for those left at their default.

    ``file`` is a path (read with :func:`load_flags_file`) or a loaded :class:`FlagsFile`. Returns
    the flags to resolve with and the provenance of each flag taken from the file.
    """
    if not isinstance(file, FlagsFile):
        file = load_flags_file(file, defaults)
    merged = dict(flags)
    sources: dict[str, Provenance] = {}
    for name, value in file.flags.items():
        if _is_default(flags.get(name, defaults.get(name)), defaults.get(name)):
            merged[name] = value
            sources[name] = file.provenance(name)
    return merged, sources


def _is_default(value: Any, default: Any) -> bool:
    normal = tuple(value) if isinstance(value, list) else value
    return type(normal) is type(default) and normal == default
