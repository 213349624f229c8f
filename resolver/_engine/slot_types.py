"""The slot types and slot namespaces, declared once; every other module reads them from here.

A slot's ``type`` (``[slot.NAME] type = "int"``) says which values it holds. The same names are
what ``is``/``is_not`` conditions test a value against (plus ``"none"``, an unset value). This table
says, per type, how a value of it is recognised at resolution, how a rule file writes it, and
whether a case's name (a TOML key, so text) can spell it. The loader, the compiler, the stage
checks, the function-call checks, the operators and the generated code all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ARG_PREFIX",
    "ENV_PREFIX",
    "FILE_PREFIX",
    "MACHINE_PREFIXES",
    "MATCHABLE_TYPES",
    "PYTHON_CLASS",
    "SLOT_TYPES",
    "TOML_CLASS",
    "TYPE_NAMES",
    "TYPE_TESTS",
    "VARIABLE_PREFIX",
    "fits",
]

#: ``arg.NAME``: a flag as the user gave it. ``env.NAME``: a fact a probe measured.
#: ``var.NAME``: an environment variable. ``file.NAME``: a file's text (the rank files).
ARG_PREFIX, ENV_PREFIX, VARIABLE_PREFIX, FILE_PREFIX = "arg.", "env.", "var.", "file."
#: The namespaces the machine snapshot fills (the rest of the inputs are the user's flags).
MACHINE_PREFIXES = (ENV_PREFIX, FILE_PREFIX, VARIABLE_PREFIX)

#: Per type: (the class a value of it is an instance of; the classes it must NOT be an instance of,
#: for the type tests ``type_of`` makes in this order (a bool is not an int); the class a rule file
#: writes it as (a TOML array is a tuple); whether a case's name, which is text, can spell it).
_TABLE: dict[str, tuple[Any, tuple[type, ...], type, bool]] = {
    "bool": (bool, (), bool, True),
    "int": (int, (bool,), int, True),
    "str": (str, (int,), str, True),
    "tuple": (tuple, (int, str), list, False),
    "mapping": (Mapping, (int, str, tuple), dict, False),
}

#: What ``type`` a slot may declare, in the order messages list them (``any``: not checked).
SLOT_TYPES = ("str", "int", "bool", "tuple", "mapping", "any")
#: What ``is``/``is_not`` conditions may name, in the order messages list them.
TYPE_NAMES = ("int", "str", "bool", "tuple", "none", "mapping")
#: For each type name, ``(class, excluded classes)``: ``type_of(value) == name`` exactly when the value
#: is an instance of the class and of none of the excluded ones.
TYPE_TESTS: dict[str, tuple[Any, tuple[type, ...]]] = {name: (row[0], row[1]) for name, row in _TABLE.items()}
#: The Python class of a value of each checked slot type, at resolution.
PYTHON_CLASS: dict[str, Any] = {name: row[0] for name, row in _TABLE.items()}
#: The class of each checked slot type's value as a rule file writes it (a ``default``).
TOML_CLASS: dict[str, type] = {name: row[2] for name, row in _TABLE.items()}
#: Slot types whose values a case's name (a TOML key: text) can spell.
MATCHABLE_TYPES = (*(name for name in SLOT_TYPES if name in _TABLE and _TABLE[name][3]), "any")


def fits(type_name: str, value: Any, *, written: bool = False) -> bool:
    """Whether ``value`` (not None) is a value of slot type ``type_name`` (``any`` takes everything; a
    boolean is never an int). ``written``: the value as a rule file writes it (a list for a tuple)."""
    row = _TABLE.get(type_name)
    if row is None:
        return True
    return isinstance(value, row[2] if written else row[0]) and not (type_name == "int" and isinstance(value, bool))
