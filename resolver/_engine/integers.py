"""Reading whole numbers from flags and environment variables, in one place.

``str.isdigit`` accepts "²" and "①", which ``int`` rejects, and ``lstrip("-")`` accepts "--2";
:func:`parse_int` accepts exactly an optional sign and ASCII digits, and refuses text longer than
Python's own limit on integer conversion before converting it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEVICES", "MAX_INT_DIGITS", "parse_int", "too_long"]

#: Longest integer text accepted (CPython refuses to convert more than 4,300 digits by default).
MAX_INT_DIGITS = 4300

#: The most devices (processes) one node may be asked for. The largest machines have tens of
#: accelerators and CPU runs rarely start more processes than cores; a count above this is a typo,
#: and it is refused before any list of device ids is built (``devices=10**8`` would need gigabytes).
MAX_DEVICES = 4096


def parse_int(value: Any) -> int | None:
    """``value`` as an int, or None when it is not one: an int (not a bool) or ASCII integer text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip()
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # ASCII 0-9 only; a module's regex costs each process its compile
        return None
    if len(digits) > min(MAX_INT_DIGITS, sys.get_int_max_str_digits() or MAX_INT_DIGITS):
        return None
    return int(text)


def too_long(value: Any) -> bool:
    """Whether ``value`` is (or, a list or tuple, holds) an int with more digits than Python will
    turn into text: such a value cannot even be shown in a message, so it is refused on entry."""
    if isinstance(value, int) and not isinstance(value, bool):
        limit = min(MAX_INT_DIGITS, sys.get_int_max_str_digits() or MAX_INT_DIGITS)
        return value.bit_length() > 3 * limit and _digits(value) > limit
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(too_long(item) for item in value)
    if isinstance(value, Mapping):
        return any(too_long(key) or too_long(item) for key, item in value.items())
    return False


def _digits(value: int) -> int:
    """Decimal digits of ``value`` without converting it to text (which fails past the limit)."""
    value = abs(value)
    digits = max(1, int(value.bit_length() * 0.30102999566398))  # log10(2): a lower bound or exact
    return digits if 10**digits > value else digits + 1
