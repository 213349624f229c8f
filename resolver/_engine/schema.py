"""The declared shape of a rule file, and the one place that checks a parsed file against it.

Each part of a rule file is an attrs class with validators; :func:`structure_file` structures the
parsed TOML into :class:`RuleFile` with a strict cattrs converter (``forbid_extra_keys``, no
coercion: ``"no"`` is not a boolean, a string is not a list, ``5`` is not text). Every problem it
finds comes back as one :class:`SchemaProblem` naming the path (``rule[3].when``) and what was
wrong, which :mod:`resolver._engine.table` turns into a :class:`~resolver._engine.errors.RuleTableError` with the
file and line.

Once checked, the values that name something are typed (:mod:`resolver._engine.expressions`:
``RefSpec``, ``ConstSpec``, ``CallSpec`` with ``DomainArg`` arguments), so the compile pass
(:mod:`resolver._engine.compile`) reads a rule's structure from these classes and never checks its
shape again.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn

from resolver._engine.expressions import (
    CallSpec,
    ConstSpec,
    Invalid,
    RefSpec,
    check_ref,
    check_when,
    is_scalar,
    non_empty,
    typed_condition,
)
from resolver._engine.slot_types import SLOT_TYPES, fits
from resolver._engine.suggest import did_you_mean
from resolver._engine.values import excerpt

__all__ = [
    "CaseSpec",
    "DomainSpec",
    "RemovedSpec",
    "RuleFile",
    "RuleSpec",
    "SLOT_TYPES",
    "SchemaProblem",
    "SlotSpec",
    "structure_file",
]


class SchemaProblem(Exception):
    """A rule file does not have the declared shape: ``path`` says where (``rule[2].set``)."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    @property
    def where(self) -> str:
        text = ""
        for part in self.path:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return text


def _unique(instance: Any, attribute: attrs.Attribute[Any], value: list[str] | None) -> None:
    if value is None:
        return
    seen: set[str] = set()
    for item in value:
        if item in seen:
            raise Invalid(attribute.name, f"`{attribute.name}` lists {item!r} twice")
        seen.add(item)


def _check_set(instance: Any, attribute: attrs.Attribute[Any], value: dict[str, Any] | None) -> None:
    for name, expr in (value or {}).items():
        try:
            _check_expr(name, expr)
        except ClassValidationError as exc:
            problem = _first_problem(exc, ())
            raise Invalid(f"set.{name}.{problem.where}", problem.message) from None
        except ValueError as exc:
            raise Invalid(f"set.{name}", str(exc)) from None


def _check_expr(name: str, expr: Any) -> None:
    where = f"set value of {name!r}"
    if is_scalar(expr) or isinstance(expr, (RefSpec, ConstSpec, CallSpec)):
        return
    if isinstance(expr, list):
        if not all(is_scalar(item) for item in expr):
            raise ValueError(f"{where} must list plain values, not {excerpt(expr)}")
        return
    if not isinstance(expr, dict):
        raise ValueError(f"{where} must be a value, {{ ref }}, {{ const }} or {{ fn, args }}")
    if "ref" in expr:
        check_ref(expr, where)
    elif "fn" in expr:
        _CONVERTER.structure(expr, CallSpec)
    elif set(expr) != {"const"}:
        raise ValueError(f"{where} must be a value, {{ ref }}, {{ const }} or {{ fn, args }}, not {excerpt(expr)}")


def _typed_set(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checked ``set`` with its tables typed: each value a constant (a value or a list), a
    :class:`RefSpec`, a :class:`ConstSpec` or a :class:`CallSpec`."""
    if value is None:
        return None
    return {name: _typed_expr(expr) for name, expr in value.items()}


def _typed_expr(expr: Any) -> Any:
    if not isinstance(expr, dict):
        return expr
    if "ref" in expr:
        return RefSpec(expr["ref"])
    if "fn" in expr:
        return _CONVERTER.structure(expr, CallSpec)
    return ConstSpec(expr["const"])


@attrs.frozen
class DomainSpec:
    """``[domain.NAME]``: accepted values, and other domains pulled in."""

    values: list[str] = attrs.field(factory=list)
    include: list[str] = attrs.field(factory=list)


@attrs.frozen
class SlotSpec:
    """``[slot.NAME]``: a value the rules read or decide."""

    stage: str = attrs.field(validator=non_empty)
    type: str = attrs.field(default="any", validator=attrs.validators.in_(SLOT_TYPES))
    domain: str | None = None
    nullable: bool = False
    required: bool = False
    default: Any = attrs.field(default=None)
    doc: str = ""
    #: Text reaches this slot lowercased, so each value of its domain must be lowercase.
    lowercase: bool = False

    @default.validator
    def _check_default(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not fits(self.type, value, written=True):
            raise Invalid("default", f"`default` {excerpt(value)} is not of the slot's type {self.type}")


@attrs.frozen
class RemovedSpec:
    """``[removed.FLAG]``: why the flag went, and its replacement for Python and the CLI;
    ``value_name`` stands for ``{value}`` when the flag was given without one (``--gpus`` alone)."""

    why: str
    python: str = ""
    cli: str = ""
    value_name: str = "VALUE"


@attrs.frozen
class CaseSpec:
    """One case of a rule with ``match``: its outcome when the matched slot holds the case's value.

    What a case gives replaces the rule's own key, except ``set`` and ``when``, which add to the
    rule's. ``none`` (alone) says why the value has no such rule, for a ``cases_complete`` table.
    """

    set: dict[str, Any] | None = attrs.field(default=None, validator=_check_set)
    when: dict[str, Any] = attrs.field(factory=dict, validator=check_when)
    why: str | None = None
    conflict: str | None = None
    hint: str | None = None
    note: str | None = None
    between: list[str] | None = None
    priority: int | None = None
    none: str | None = attrs.field(default=None)

    @none.validator
    def _check_none(self, attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is None:
            return
        if not value.strip():
            raise Invalid("none", "`none` says why this value has no rule of the table: write the reason")
        keys = ("set", "why", "conflict", "hint", "note", "between", "priority")
        given = (["when"] if self.when else []) + [key for key in keys if getattr(self, key) is not None]
        if given:
            raise Invalid(
                "none", f"`none` stands alone (this value has no rule), but the case gives {', '.join(given)}"
            )


@attrs.frozen
class RuleSpec:
    """``[[rule]]``: conditions and exactly one outcome (checked further when the table compiles).

    A rule with ``match = "slot"`` and ``cases`` is a table of rules, one per value of that slot
    (``resolver._engine.cases`` expands it when the files are loaded), each named ``ID.VALUE``, or by
    ``case_id`` with the value in place of ``{case}``.
    """

    id: str = attrs.field(validator=non_empty)
    stage: str = attrs.field(validator=non_empty)
    when: dict[str, Any] = attrs.field(factory=dict, validator=check_when)
    set: dict[str, Any] | None = attrs.field(default=None, validator=_check_set)
    why: str = ""
    conflict: str | None = None
    hint: str | None = None
    note: str | None = None
    between: list[str] = attrs.field(factory=list)
    priority: int = 0
    match: str | None = attrs.field(default=None)
    cases_join: str | None = attrs.field(default=None)
    case_id: str | None = attrs.field(default=None)
    cases_complete: bool = attrs.field(default=False)
    cases: dict[str, CaseSpec] = attrs.field(factory=dict)

    @match.validator
    def _check_match(self, attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is None:
            return
        if not value:
            raise Invalid("match", "`match` must name a slot")
        if value in self.when:
            raise Invalid(
                f"when.{value}",
                f"`when` tests {value!r}, which `match` gives each case: drop it from `when`",
            )

    @cases_join.validator
    def _check_cases_join(self, attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is not None and self.match is None:
            raise Invalid("cases_join", "`cases_join` adds the values of `cases` to a domain; it needs `match`")

    @case_id.validator
    def _check_case_id(self, attribute: attrs.Attribute[Any], value: str | None) -> None:
        if value is None:
            return
        if self.match is None:
            raise Invalid("case_id", "`case_id` names the rules made from `cases`; it needs `match`")
        if value.count("{case}") != 1:
            raise Invalid("case_id", f"`case_id` {value!r} must hold {{case}} once: each case's value takes its place")

    @cases_complete.validator
    def _check_cases_complete(self, attribute: attrs.Attribute[Any], value: bool) -> None:
        if value and self.match is None:
            raise Invalid("cases_complete", "`cases_complete` asks for a case per value of `match`; it needs `match`")

    @cases.validator
    def _check_cases(self, attribute: attrs.Attribute[Any], value: dict[str, CaseSpec]) -> None:
        if value and self.match is None:
            raise Invalid("cases", '`cases` needs `match = "slot"`: the slot whose value picks the case')

    def __attrs_post_init__(self) -> None:
        # after the validators: what they checked, typed for the compile pass
        object.__setattr__(self, "when", {name: typed_condition(spec) for name, spec in self.when.items()})
        object.__setattr__(self, "set", _typed_set(self.set))


@attrs.frozen
class RuleFile:
    """One rule file: any of ``stages``, ``[domain.*]``, ``[slot.*]``, ``[[rule]]``, ``[removed.*]``
    and ``[cases."RULE"]`` (more cases for a rule with ``match``, which may be in another file)."""

    stages: list[str] | None = attrs.field(default=None, validator=_unique)
    domain: dict[str, DomainSpec] = attrs.field(factory=dict)
    slot: dict[str, SlotSpec] = attrs.field(factory=dict)
    rule: list[RuleSpec] = attrs.field(factory=list)
    removed: dict[str, RemovedSpec] = attrs.field(factory=dict)
    cases: dict[str, dict[str, CaseSpec]] = attrs.field(factory=dict)


# -- the strict converter ---------------------------------------------------------------------------


def _strict(kind: type, name: str) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"expected {name}, got {excerpt(value)}")
        return value

    return structure


def _structure_list(value: Any, cls: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {excerpt(value)}")
    (item,) = typing.get_args(cls) or (Any,)
    result = []
    for index, v in enumerate(value):
        try:
            result.append(_CONVERTER.structure(v, item))
        except Exception as exc:  # noqa: BLE001 - reported with the index
            exc.__notes__ = [*getattr(exc, "__notes__", []), _PathNote(index)]
            raise
    return result


def _structure_dict(value: Any, cls: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a table, got {excerpt(value)}")
    _, item = typing.get_args(cls) or (str, Any)
    result = {}
    for key, v in value.items():
        try:
            result[key] = _CONVERTER.structure(v, item)
        except Exception as exc:  # noqa: BLE001 - reported with the key
            exc.__notes__ = [*getattr(exc, "__notes__", []), _PathNote(key)]
            raise
    return result


class _PathNote(str):
    """An exception note naming the list index or table key being structured (typed, not parsed back)."""

    step: str | int

    def __new__(cls, step: str | int) -> _PathNote:
        note = super().__new__(cls, f"at {'index' if isinstance(step, int) else 'key'} {step}")
        note.step = step
        return note


_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


def _table_of(cls: type) -> Any:
    """Structure an attrs class from a TOML table, refusing anything that is not a table."""
    structure: Callable[[Any, Any], Any] = make_dict_structure_fn(cls, _CONVERTER, _cattrs_forbid_extra_keys=True)
    names = frozenset(a.name for a in attrs.fields(cls))

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a table, got {excerpt(value)}")
        extra = value.keys() - names
        if extra:  # before "missing key": `stge` is reported as a typo of `stage`, not as `stage` missing
            raise ForbiddenExtraKeysError(None, cls, set(extra))
        return structure(value, cls)

    return hook


_CONVERTER.register_structure_hook_factory(attrs.has, _table_of)
_CONVERTER.register_structure_hook(str, _strict(str, "text"))
_CONVERTER.register_structure_hook(bool, _strict(bool, "true or false"))
_CONVERTER.register_structure_hook(int, _strict(int, "an integer"))
_CONVERTER.register_structure_hook(Any, lambda value, _: value)
_CONVERTER.register_structure_hook_func(lambda t: typing.get_origin(t) is list, _structure_list)
_CONVERTER.register_structure_hook_func(lambda t: typing.get_origin(t) is dict, _structure_dict)


def _first_problem(exc: BaseException, path: tuple[str | int, ...]) -> SchemaProblem:
    """Walk cattrs' nested errors to the first leaf, collecting the path to it."""
    # the innermost list or table adds its note first: read them outermost first
    for note in reversed(getattr(exc, "__notes__", [])):
        if isinstance(note, _PathNote):
            path = (*path, note.step)
    if isinstance(exc, ForbiddenExtraKeysError):
        names = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
        extra = sorted(exc.extra_fields)
        close = [f"{key}: {hint}" for key in extra if (hint := did_you_mean(key, names))]
        suggestion = f" ({'; '.join(close)})" if close else ""
        return SchemaProblem(path, f"unknown key(s) {', '.join(extra)}{suggestion}; expected {', '.join(names)}")
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        with_notes, _ = exc.group_exceptions()
        if with_notes:
            inner, note = with_notes[0]
            name = getattr(note, "name", None)
            index = getattr(note, "index", None)
            step: tuple[str | int, ...] = (name,) if name is not None else ((index,) if index is not None else ())
            return _first_problem(inner, (*path, *step))
        return _first_problem(exc.exceptions[0], path)
    if isinstance(exc, Invalid):
        return SchemaProblem((*path, *exc.key.split(".")), str(exc))
    if isinstance(exc, KeyError):
        return SchemaProblem(path[:-1], f"missing required key `{exc.args[0]}`")
    message = str(exc)
    if type(exc).__name__ == "ValueError" or isinstance(exc, TypeError):
        return SchemaProblem(path, message)
    return SchemaProblem(path, f"{type(exc).__name__}: {message}")


def structure_file(document: Mapping[str, Any]) -> RuleFile:
    """A parsed rule file as a :class:`RuleFile`; raises :class:`SchemaProblem` if it is not one."""
    try:
        return _CONVERTER.structure(dict(document), RuleFile)
    except SchemaProblem:
        raise
    except Exception as exc:  # noqa: BLE001 - cattrs raises many kinds; all become one problem
        raise _first_problem(exc, ()) from exc
