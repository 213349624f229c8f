"""The one range every timeout a user can set must fall in, and the one check of it.

Every timeout is a number of seconds from :data:`MIN_SECONDS` to :data:`MAX_SECONDS`: the launch
timeout (``runtime.launch(timeout=)``, the strategy option ``timeout``, ``resolver run --timeout``),
the rendezvous timeout (the option ``rendezvous_timeout``, ``RUNTIME_RENDEZVOUS_TIMEOUT``), the
check's (``runtime.check(timeout=)``, ``resolver check --timeout``) and ``monitored_barrier``'s.
Leaving one unset keeps its documented default (no limit for the launch timeout); there is no
value that means "off".

- At least 1 ms: torch counts its timeouts in whole milliseconds and drops the rest, so less is
  0 ms, which fails at once ("timed out after 0ms"); 0 and negative values are refused for the same
  reason, not taken as "no limit".
- At most 7 days: longer than one attempt of a run on most clusters may last, and short enough to
  catch milliseconds given as seconds (half an hour in milliseconds, 1800000, is 20 days). The
  engines would take more (gloo collectives and monitored barriers with 1e9 s work; Python's waits
  refuse more than ``threading.TIMEOUT_MAX``, about 292 years, with an ``OverflowError``). NaN,
  infinity and ``1e400`` (which Python reads as infinity) are refused with the rest.

Each caller raises its own error type with this text (the runtime a ``RuntimeConfigError``, the CLI a
usage error); the text always states the accepted range.
"""

from __future__ import annotations

import math
from datetime import timedelta

__all__ = ["MAX_SECONDS", "MIN_SECONDS", "TIMEOUT_RANGE", "parse_timeout", "timeout_problem"]

#: The shortest timeout, in seconds (1 ms: torch's unit).
MIN_SECONDS = 0.001
#: The longest timeout, in seconds (7 days).
MAX_SECONDS = 7 * 24 * 3600.0
#: The accepted range, as every message states it.
TIMEOUT_RANGE = "a timeout is a number of seconds from 0.001 (1 ms) to 604800 (7 days)"


def _seconds(value: object, *, allow_timedelta: bool) -> float | None:
    if isinstance(value, timedelta) and allow_timedelta:
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float: finite, far too long
        return 1e308


def timeout_problem(value: object, given: str, *, allow_timedelta: bool = False) -> str | None:
    """Why ``value`` is not a timeout, or None; the text starts with ``given`` (how the user gave it,
    e.g. ``"timeout=nan"``) and ends with the accepted range.

    ``allow_timedelta``: a :class:`datetime.timedelta` is accepted too (where the API takes one).
    """
    seconds = _seconds(value, allow_timedelta=allow_timedelta)
    if seconds is None:
        kind = "a number of seconds or a datetime.timedelta" if allow_timedelta else "a number of seconds"
        return f"{given} is not {kind}; {TIMEOUT_RANGE}"
    if math.isnan(seconds):
        why = "is not a number"
    elif seconds > MAX_SECONDS:
        why = "is longer than 7 days" if math.isfinite(seconds) else "is infinite"
    elif seconds <= 0:
        why = "is not positive"
    elif seconds < MIN_SECONDS:
        why = "is less than 1 ms (torch counts whole milliseconds: it would time out at once)"
    else:
        return None
    return f"{given} {why}; {TIMEOUT_RANGE}"


def parse_timeout(text: str, given: str) -> float:
    """``text`` (a command-line value or an environment variable) as seconds, or a ``ValueError``
    saying why it is not a timeout (:func:`timeout_problem`)."""
    try:
        value: object = float(text.strip())
    except ValueError:
        value = text
    problem = timeout_problem(value, given)
    if problem is not None:
        raise ValueError(problem)
    return float(value)  # type: ignore[arg-type]
