"""The flags as the rules read them: normalized (text stripped and lowercased, lists as tuples,
one plugin string as one plugin) into the ``arg.*`` input slots, and the ones a user gave.

Kept apart from the engine so that a rank comparing its ``launch()`` flags with its config's
loads no rule machinery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import compress
from operator import is_not
from typing import Any

from resolver._domain.flags import FLAGS
from resolver._engine.errors import ResolutionError
from resolver._engine.integers import MAX_INT_DIGITS, too_long

__all__ = ["DEFAULT_INPUTS", "NAME_ORDER", "by_name", "flag_inputs", "flag_values", "given_flags"]


def _normalize_flag(value: Any, lowercase: bool = True) -> Any:
    if isinstance(value, str):
        return value.strip().lower() if lowercase else value.strip()
    if isinstance(value, list):
        return tuple(value)
    return value


def _names(value: Any) -> Any:
    """A repeatable flag's names as a tuple: a single string is one name; anything but a list stays
    as it is (the rules refuse it, naming the value)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, tuple):
        return tuple(_normalize_flag(p) for p in value)
    return value


def _normalized(name: str, value: Any, lowercase: bool) -> Any:
    value = _normalize_flag(value, lowercase)
    if too_long(value):
        raise ResolutionError(
            f"{name} holds an integer of more than {MAX_INT_DIGITS} digits, which is no {name} value",
            hint=f"pass {name} as documented (resolver explain --help lists the accepted forms)",
        )
    return _names(value) if name in _REPEATABLE else value


_REPEATABLE = frozenset(flag.name for flag in FLAGS if flag.repeatable)
#: An int of at most this many bits (at most 579 digits) is never :func:`~resolver._engine.integers.too_long`,
#: whatever ``sys.set_int_max_str_digits`` says (it accepts no limit under 640).
_PLAIN_INT_BITS = 3 * 640
#: Per flag: its name, slot, default, whether text is lowercased, and the default normalized
#: (a flag left at its default, the same object, takes that at once).
_FAST = tuple(
    (flag.name, f"arg.{flag.name}", flag.default, flag.lowercase, _normalized(flag.name, flag.default, flag.lowercase))
    for flag in sorted(FLAGS, key=lambda flag: flag.name)
)
#: The order :func:`flag_inputs` takes a tuple of flag values in (and writes the given ones in).
NAME_ORDER = tuple(name for name, *_ in _FAST)
_DEFAULTS = tuple(default for _, _, default, _, _ in _FAST)


def by_name(flags: tuple[Any, ...]) -> dict[str, Any]:
    """Every flag's value in :data:`NAME_ORDER`, as a mapping from its name."""
    return dict(zip(NAME_ORDER, flags, strict=True))


def flag_values(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The arg.* inputs, normalized."""
    return flag_inputs(flags)[0]


#: Every arg.* input at its flag's default, normalized.
DEFAULT_INPUTS: dict[str, Any] = {slot: normalized for _, slot, _, _, normalized in _FAST}


def flag_inputs(
    flags: Mapping[str, Any] | tuple[Any, ...], values: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arg.* inputs, normalized, and the flags given (those whose normalized value differs
    from the default, sorted by name), in one pass. ``flags`` may hold other names (a signature's
    locals), or be every flag's value in :data:`NAME_ORDER`.

    ``values``: a dict that already holds :data:`DEFAULT_INPUTS`, to write the inputs into (only
    a flag not left at its default, the same object, is written).
    """
    if values is None:
        values = dict(DEFAULT_INPUTS)
    given: dict[str, Any] = {}
    pairs: Iterable[tuple[tuple[str, str, Any, bool, Any], Any]]
    if type(flags) is tuple:
        if len(flags) != len(_FAST):
            raise ValueError(f"{len(flags)} flag values, where NAME_ORDER names {len(_FAST)}")
        # only the flags not left at their default (the same object) reach the loop, picked out in C
        pairs = compress(zip(_FAST, flags, strict=False), map(is_not, flags, _DEFAULTS))  # lengths checked above
    else:
        # a Mapping: callers pass a plain tuple or a mapping (the exact type test is the fast path,
        # and mypy does not narrow the union on it)
        pairs = ((fast, flags.get(fast[0], fast[2])) for fast in _FAST)  # type: ignore[union-attr]
    for (name, slot, default, lowercase, _), value in pairs:
        if value is default:
            continue
        kind = type(value)
        if kind is str and name not in _REPEATABLE:  # text is never too long: no need to look
            value = values[slot] = value.strip().lower() if lowercase else value.strip()  # as _normalize_flag
        elif kind is int and value.bit_length() <= _PLAIN_INT_BITS:
            value = values[slot] = value
        else:
            value = values[slot] = _normalized(name, value, lowercase)
        if type(value) is not type(default) or value != default:
            given[name] = value
    return values, given


def given_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags that differ from their defaults, normalized as ``resolve()`` reads them (text
    lowercased, lists as tuples): what ``ResolvedConfig.flags`` records."""
    return flag_inputs(flags)[1]
