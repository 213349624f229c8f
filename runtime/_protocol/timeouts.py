"""The runtime's side of the one timeout check (:mod:`resolver._domain.timeouts` holds the range):
a value out of range is a :class:`~runtime.errors.RuntimeConfigError` that says how it was given,
states the accepted range and ends with what to give instead."""

from __future__ import annotations

from resolver._runtime_interface import timeout_problem
from runtime.errors import RuntimeConfigError

__all__ = ["TIMEOUT_HINTS", "check_timeout"]

#: What to give instead of a value out of range, for each timeout a user can set.
TIMEOUT_HINTS = {
    "timeout": "give the seconds a run may take, e.g. timeout=3600, or leave it unset (None) for no limit",
    "progress_timeout": "give the seconds no rank may go without progress, e.g. progress_timeout=300, or 0 to "
    "turn the progress watchdog off",
    "rendezvous_timeout": "give the seconds every rank has to join, e.g. rendezvous_timeout=120, or leave it "
    "unset for RUNTIME_RENDEZVOUS_TIMEOUT, else 300",
    "RUNTIME_RENDEZVOUS_TIMEOUT": "set it to e.g. 120, or unset it for the default (300 s)",
    "collective": "give the seconds each operation may take (or a datetime.timedelta), e.g. timeout=60, or "
    "leave it unset (None) for the backend's default",
    "check": "give the seconds each step of the check may take, e.g. timeout=30, or leave it unset for 10",
}


def check_timeout(value: object, given: str, hint: str) -> float:
    """``value`` as seconds, or a :class:`RuntimeConfigError` that starts with ``given`` (how the user
    gave it), states the accepted range and ends with ``hint`` (one of :data:`TIMEOUT_HINTS`)."""
    problem = timeout_problem(value, given)
    if problem is not None:
        raise RuntimeConfigError(problem, hint=hint)
    return float(value)  # type: ignore[arg-type]
